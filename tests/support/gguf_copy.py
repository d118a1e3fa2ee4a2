"""Copy a GGUF file with some metadata changed, using the gguf package (tensors are copied as they are)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

Edit = Callable[[str, Any], Any]
"""Given a key and its value, return the value to write (the same one to keep it)."""


def copy_gguf(
    src: Path,
    dst: Path,
    *,
    values: dict[str, Any] | None = None,
    edit: Edit | None = None,
    keep_tensor: Callable[[str], bool] | None = None,
) -> Path:
    """Write ``src`` to ``dst`` with ``values`` replaced (or added), every value passed through ``edit``,
    and only the tensors ``keep_tensor`` keeps (all by default).

    The gguf writer refuses empty arrays, so keys holding one are left out
    (llama.cpp needs none of them).
    """
    import gguf

    values = dict(values or {})
    reader = gguf.GGUFReader(src)
    fields = reader.fields
    arch = values.pop("general.architecture", fields["general.architecture"].contents())
    writer = gguf.GGUFWriter(dst, arch, use_temp_file=False)
    for name, field in fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = values.pop(name) if name in values else field.contents()
        if edit is not None:
            value = edit(name, value)
        main = field.types[0]
        if main == gguf.GGUFValueType.ARRAY:
            if not value:
                continue
            writer.add_key_value(name, value, main, sub_type=field.types[-1])
        else:
            writer.add_key_value(name, value, main)
    for name, value in values.items():  # new keys: uint32, strings or uint32 arrays
        if isinstance(value, str):
            writer.add_string(name, value)
        elif isinstance(value, list):
            writer.add_array(name, value)
        else:
            writer.add_uint32(name, int(value))
    for tensor in reader.tensors:
        if keep_tensor is not None and not keep_tensor(tensor.name):
            continue
        writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst
