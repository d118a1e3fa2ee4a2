"""Reading attached documents: every kind read, every bad file refused with one line and nothing read it should not."""

from __future__ import annotations

import os
import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest

from specchat.core.chat import documents
from specchat.core.chat.documents import DocumentError, decode_text, html_to_text, human_size, read_document

HAS_MARKITDOWN = documents.markitdown_available()


def _one_line(exc: pytest.ExceptionInfo[DocumentError]) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text
    return text


# -- text, read directly -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("notes.txt", "Plain words.\nSecond line."),
        ("readme.md", "# Title\n\n- item *one*\n"),
        ("module.py", "def add(a: int, b: int) -> int:\n    return a + b\n"),
        ("table.csv", "name,price\napple,1.20\npear,0.95\n"),
        ("data.json", '{"key": [1, 2, 3], "name": "caf\u00e9"}'),
    ],
)
def test_text_kinds_read_as_they_are(tmp_path: Path, name: str, content: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    doc = read_document(path)
    assert doc.text == content and doc.name == name and doc.size == len(content.encode()) and doc.read_as == "UTF-8"


def test_html_is_read_as_its_visible_text(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_text(
        "<!doctype html><html><head><title>T</title><style>p{color:red}</style></head>"
        "<body><h1>Heading</h1><p>First &amp; <b>bold</b> paragraph.</p><script>var x = 1;</script>"
        "<ul><li>one</li><li>two</li></ul></body></html>",
        encoding="utf-8",
    )
    doc = read_document(path)
    assert doc.text == "Heading\nFirst & bold paragraph.\none\ntwo"
    assert doc.read_as.startswith("HTML")
    assert html_to_text("<p>a</p><p>b</p>") == "a\nb"


@pytest.mark.parametrize(
    ("encoded", "expected", "read_as"),
    [
        ("caf\u00e9 \u2014 na\u00efve".encode("utf-8-sig"), "caf\u00e9 \u2014 na\u00efve", "UTF-8 (with BOM)"),
        ("caf\u00e9 \u2014 ok".encode("utf-16"), "caf\u00e9 \u2014 ok", "UTF-16"),
        ("caf\u00e9 ok, plain".encode("utf-16-le"), "caf\u00e9 ok, plain", "UTF-16-LE"),
        ("caf\u00e9 \u20ac5 \u201cq\u201d".encode("cp1252"), "caf\u00e9 \u20ac5 \u201cq\u201d", "Windows-1252"),
        ("Gr\u00fc\u00dfe aus K\u00f6ln".encode("latin-1"), "Gr\u00fc\u00dfe aus K\u00f6ln", "Windows-1252"),
    ],
)
def test_odd_encodings_are_read_sensibly(tmp_path: Path, encoded: bytes, expected: str, read_as: str) -> None:
    path = tmp_path / "odd.txt"
    path.write_bytes(encoded)
    doc = read_document(path)
    assert doc.text == expected and doc.read_as == read_as


def test_a_bom_that_lies_is_one_line() -> None:
    with pytest.raises(DocumentError) as exc:
        decode_text("bad.txt", b"\xef\xbb\xbfok \xff\xfe\xfd")
    assert _one_line(exc).startswith("bad.txt starts like UTF-8-SIG text")


# -- bad files: one line, nothing read that should not be --------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "what"),
    [
        ("photo.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "is a PNG image"),
        ("photo.txt", b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4, "is a JPEG image"),
        ("a.out", b"\x7fELF\x02\x01\x01" + bytes(300), "is a program"),
        ("blob.dat", bytes(range(256)) * 8, "is a binary file"),
        ("noise.txt", bytes([1, 2, 3, 4, 5, 6, 0x80, 0x81]) * 100, "is a binary file"),
    ],
)
def test_binary_files_and_images_are_refused(tmp_path: Path, name: str, data: bytes, what: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(DocumentError) as exc:
        read_document(path)
    assert _one_line(exc) == f"{name} {what}, not a text document"
    assert path.read_bytes() == data  # left as it was


def test_a_1gb_file_is_refused_by_its_size_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "huge.txt"
    with open(path, "wb") as f:
        f.truncate(1024**3)  # sparse: 1 GB on paper, nothing on disk

    opened: list[object] = []
    real_open = os.open

    def spy_open(*a: Any, **k: Any) -> int:
        opened.append(a)
        return real_open(*a, **k)

    monkeypatch.setattr(f"{documents.__name__}.os.open", spy_open)
    with pytest.raises(DocumentError) as exc:
        read_document(path)
    assert _one_line(exc) == "huge.txt is 1.0 GB; documents up to 32.0 MB can be attached"
    assert opened == []  # refused by its size alone: never opened


def test_a_symlink_to_dev_zero_and_a_fifo_are_refused_without_opening(tmp_path: Path) -> None:
    link = tmp_path / "zeros.txt"
    link.symlink_to("/dev/zero")
    with pytest.raises(DocumentError) as exc:
        read_document(link)
    assert _one_line(exc) == "zeros.txt is a device, not a file that can be attached"

    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    done = threading.Event()
    errors: list[str] = []

    def attach() -> None:
        try:
            read_document(fifo)
        except DocumentError as e:
            errors.append(str(e))
        done.set()

    threading.Thread(target=attach, daemon=True).start()
    # A blocking open of a FIFO with no writer never returns; the refusal comes at once.
    assert done.wait(30), "reading a FIFO hung"
    assert errors == ["pipe.txt is a pipe (FIFO), not a file that can be attached"]
    with pytest.raises(DocumentError) as exc:
        read_document(tmp_path)
    assert _one_line(exc).endswith("is a folder, not a file that can be attached")


def test_a_file_gone_between_attach_and_read_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "gone.md"
    with pytest.raises(DocumentError) as exc:
        read_document(path)
    assert _one_line(exc) == "gone.md is no longer there (moved or deleted?)"


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    # /proc/self/mem is a regular file that fails on reading (for root too, unlike a mode-000 file)
    path = tmp_path / "memory.txt"
    path.symlink_to("/proc/self/mem")
    with pytest.raises(DocumentError) as exc:
        read_document(path)
    assert _one_line(exc) == "memory.txt could not be read: Input/output error"


def test_an_empty_file_has_no_text(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(DocumentError) as exc:
        read_document(tmp_path / "empty.txt")
    assert _one_line(exc) == "empty.txt has no text"


# -- PDF and DOCX, made here --------------------------------------------------------------


def make_pdf(pages: list[str], *, encrypt: bool = False) -> bytes:
    """A small valid PDF with one line of Helvetica text per page, written by hand (xref offsets counted)."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {5 + 2 * i} 0 R"
            " /Resources << /Font << /F1 3 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    extra = b" /Encrypt << /Filter /Standard /V 1 /R 2 /O <00> /U <00> /P -4 >>" if encrypt else b""
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, extra, xref)
    return bytes(out)


def make_docx(paragraphs: list[str]) -> bytes:
    """A minimal DOCX (a zip of three XML parts) with the given paragraphs."""
    import io

    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(
            "[Content_Types].xml",
            '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
            'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
            'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName='
            '"/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.'
            'document.main+xml"/></Types>',
        )
        z.writestr(
            "_rels/.rels",
            '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/'
            'package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/'
            'officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>',
        )
        z.writestr(
            "word/document.xml",
            '<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/'
            f'wordprocessingml/2006/main"><w:body>{body}</w:body></w:document>',
        )
    return buf.getvalue()


needs_markitdown = pytest.mark.skipif(not HAS_MARKITDOWN, reason="the optional [documents] extra is not installed")


@needs_markitdown
def test_a_pdf_is_read_page_by_page(tmp_path: Path) -> None:
    path = tmp_path / "report.pdf"
    path.write_bytes(make_pdf(["The first page says hello.", "Section two is about lookup.", "The end."]))
    doc = read_document(path)
    assert doc.read_as == "PDF"
    assert "The first page says hello." in doc.text and "Section two is about lookup." in doc.text
    assert doc.text.index("hello") < doc.text.index("lookup") < doc.text.index("The end")
    assert doc.pages == 3  # the converter marks page breaks: a cut to fit keeps whole pages


@needs_markitdown
def test_a_docx_is_read(tmp_path: Path) -> None:
    path = tmp_path / "letter.docx"
    path.write_bytes(make_docx(["Dear reader,", "The quarterly figures rose by 12 percent."]))
    doc = read_document(path)
    assert doc.read_as == "DOCX"
    assert "Dear reader," in doc.text and "The quarterly figures rose by 12 percent." in doc.text


def test_an_encrypted_pdf_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "locked.pdf"
    path.write_bytes(make_pdf(["secret"], encrypt=True))
    with pytest.raises(DocumentError) as exc:
        read_document(path)
    assert _one_line(exc) == "locked.pdf is an encrypted (password-protected) PDF; attach an unprotected copy"


@needs_markitdown
def test_an_unreadable_pdf_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 9 0 R >>\nendobj\ntrailer <<>>\n%%EOF garbage")
    with pytest.raises(DocumentError) as exc:
        read_document(path)
    line = _one_line(exc)
    assert line.startswith("broken.pdf ")
    assert "could not be read as PDF" in line or "has no text layer" in line


def test_a_file_named_pdf_that_is_not_one_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "fake.pdf"
    path.write_text("just text")
    with pytest.raises(DocumentError) as exc:
        read_document(path)
    assert _one_line(exc) == "fake.pdf is not a PDF (it does not start as one)"


def test_a_docx_zip_bomb_is_refused_before_unzipping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bomb.docx"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        with z.open("word/document.xml", "w", force_zip64=True) as part:
            chunk = b"\0" * (1024 * 1024)
            for _ in range(200):  # 200 MB of zeros: about 200 KB zipped
                part.write(chunk)
    assert path.stat().st_size < 1024 * 1024
    monkeypatch.setattr(zipfile.ZipFile, "read", lambda *a, **k: pytest.fail("unzipped a zip bomb"))
    with pytest.raises(DocumentError) as exc:
        read_document(path)
    assert _one_line(exc).startswith("bomb.docx would unzip to 200 MB from ")
    assert _one_line(exc).endswith("; refused as a possible zip bomb")


def test_a_damaged_docx_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "torn.docx"
    path.write_bytes(make_docx(["text"])[:60])
    with pytest.raises(DocumentError) as exc:
        read_document(path)
    assert _one_line(exc).startswith("torn.docx is damaged: it is not a readable office file")


def test_without_the_extra_a_pdf_gets_a_note_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_markitdown(name: str, *args: object, **kwargs: object) -> object:
        if name == "markitdown" or name.startswith("markitdown."):
            raise ImportError("No module named 'markitdown'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_markitdown)
    path = tmp_path / "report.pdf"
    path.write_bytes(make_pdf(["hello"]))
    with pytest.raises(DocumentError) as exc:
        read_document(path)
    assert _one_line(exc) == (
        "report.pdf: reading PDF files needs the optional documents extra (pip install 'specchat[documents]')"
    )
    assert not documents.markitdown_available()


def test_human_sizes() -> None:
    assert [human_size(n) for n in (0, 1, 1023, 1536, 5 * 1024**2, 1024**3)] == [
        "0 bytes",
        "1 byte",
        "1023 bytes",
        "1.5 KB",
        "5.0 MB",
        "1.0 GB",
    ]
