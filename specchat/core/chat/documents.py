"""Reading a file the user attaches to a message as text the model can read.

Text, Markdown, code, CSV, JSON and HTML are read here (HTML as its text); PDF and office
files (DOCX, PPTX, XLSX, EPUB) go through Microsoft's ``markitdown``, the optional
``[documents]`` extra. Everything that can go wrong with a file a user picks raises
:class:`DocumentError` with one line, and nothing is read that was not asked for: a
device, a FIFO or a symlink to one is refused before it is opened, a file too big by its
size before it is read, and an office file whose unzipped parts are too big before it is
unzipped.
"""

from __future__ import annotations

import codecs
import io
import os
import stat
import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from specchat.core.types import SpecchatError

MAX_FILE_BYTES = 32 * 1024 * 1024  # a document larger than this is refused by its size, before reading
MAX_UNZIPPED_BYTES = 128 * 1024 * 1024  # an office file's parts, unzipped, all together
MAX_ZIP_RATIO = 200  # unzipped / zipped: text compresses about 5-20x; a zip bomb a thousandfold and more
MAX_TEXT_CHARS = 8 * 1024 * 1024  # the extracted text kept (a context of a million tokens is ~4M characters)

CONVERTED = {".pdf": "PDF", ".docx": "DOCX", ".pptx": "PPTX", ".xlsx": "XLSX", ".epub": "EPUB"}
_ZIPPED = {".docx", ".pptx", ".xlsx", ".epub"}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"BM", "a BMP image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
)
_BINARY_MAGIC = (
    (b"\x7fELF", "a program"),
    (b"MZ", "a program"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"PK\x03\x04", "a zip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"GGUF", "a GGUF model"),
)
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
PAGE_BREAK = "\f"  # the PDF converter's mark between pages


class DocumentError(SpecchatError):
    """A file could not be read as a document; ``str(error)`` is one line naming it."""


@dataclass(frozen=True)
class Document:
    """A file read as text: its name, its size on disk, the text, and how it was read ("UTF-8", "PDF", ...)."""

    name: str
    size: int
    text: str
    read_as: str

    @property
    def pages(self) -> int:
        """How many pages the text holds (1 unless the converter marked page breaks)."""
        return self.text.count(PAGE_BREAK) + 1


def human_size(size: int) -> str:
    """``1536`` -> ``"1.5 KB"``: a file's size as the window shows it."""
    if size < 1024:
        return f"{size} bytes" if size != 1 else "1 byte"
    value = float(size)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1024
        if value < 1024 or unit == "TB":
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    raise AssertionError("unreachable")


def read_document(path: str | Path, *, max_bytes: int = MAX_FILE_BYTES) -> Document:
    """Read ``path`` as a document; raises :class:`DocumentError` (one line) for anything it cannot read."""
    path = Path(path)
    name = path.name or str(path)
    data = _read_regular_file(path, name, max_bytes)
    suffix = path.suffix.lower()
    if suffix in CONVERTED or data.startswith(b"%PDF-"):
        text, read_as = _converted(name, data, suffix if suffix in CONVERTED else ".pdf")
    else:
        text, read_as = decode_text(name, data)
        if suffix in HTML_SUFFIXES or (suffix == "" and text.lstrip()[:15].lower().startswith("<!doctype html")):
            text, read_as = html_to_text(text), f"HTML ({read_as})"
    text = text.replace("\r\n", "\n").replace("\x00", "")
    if len(text) > MAX_TEXT_CHARS:
        raise DocumentError(
            f"{name}: its text is {len(text):,} characters, more than the {MAX_TEXT_CHARS:,} a message can hold"
        )
    if not text.strip():
        empty = "has no text layer (a scanned PDF? it would need OCR)" if read_as == "PDF" else "has no text"
        raise DocumentError(f"{name} {empty}")
    return Document(name, len(data), text, read_as)


def _read_regular_file(path: Path, name: str, max_bytes: int) -> bytes:
    """The file's bytes, refusing what is not a regular file (without opening it) or too big (without reading it)."""
    try:
        info = os.stat(path)  # follows a symlink: a link to /dev/zero is judged as /dev/zero
    except FileNotFoundError:
        raise DocumentError(f"{name} is no longer there (moved or deleted?)") from None
    except OSError as exc:
        raise DocumentError(f"{name} could not be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        what = (
            "a folder"
            if stat.S_ISDIR(info.st_mode)
            else "a pipe (FIFO)"
            if stat.S_ISFIFO(info.st_mode)
            else "a device"
            if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
            else "a socket"
            if stat.S_ISSOCK(info.st_mode)
            else "not a regular file"
        )
        raise DocumentError(f"{name} is {what}, not a file that can be attached")
    if info.st_size > max_bytes:
        raise DocumentError(
            f"{name} is {human_size(info.st_size)}; documents up to {human_size(max_bytes)} can be attached"
        )
    try:
        # O_NONBLOCK: had the file been swapped for a FIFO since the stat above, opening it does not wait for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise DocumentError(f"{name} is no longer there (moved or deleted?)") from None
    except OSError as exc:
        raise DocumentError(f"{name} could not be read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        opened = os.fstat(f.fileno())
        if not stat.S_ISREG(opened.st_mode):
            raise DocumentError(f"{name} changed into something that is not a file while it was opened")
        try:
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise DocumentError(f"{name} could not be read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise DocumentError(f"{name} grew past {human_size(max_bytes)} while it was read")
    return data


def decode_text(name: str, data: bytes) -> tuple[str, str]:
    """``data`` as text and the encoding it was read in; a binary file or an image raises DocumentError.

    A byte-order mark says the encoding (UTF-8, UTF-16, UTF-32); else UTF-8 if it decodes, UTF-16 without a
    mark if every other byte is NUL, and otherwise Windows-1252 (Latin-1's superset, what an "odd" Western
    file most often is), bytes it does not define read as Latin-1.
    """
    for magic, what in _IMAGE_MAGIC + _BINARY_MAGIC:
        if data.startswith(magic) and not (magic == b"BM" and _mostly_text(data)):
            raise DocumentError(f"{name} is {what}, not a text document")
    if data[:12].startswith(b"RIFF") and data[8:12] == b"WEBP":
        raise DocumentError(f"{name} is a WebP image, not a text document")
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding), encoding.upper().replace("-SIG", " (with BOM)")
            except UnicodeDecodeError:
                raise DocumentError(f"{name} starts like {encoding.upper()} text but does not decode as it") from None
    sample = data[:4096]
    if sample and sample.count(0) * 3 > len(sample):
        for encoding in ("utf-16-le", "utf-16-be"):
            zeros = sample[1::2] if encoding == "utf-16-le" else sample[0::2]
            if zeros and zeros.count(0) * 10 >= len(zeros) * 9:
                try:
                    return data.decode(encoding), encoding.upper()
                except UnicodeDecodeError:
                    break
        raise DocumentError(f"{name} is a binary file, not a text document")
    if 0 in sample:
        raise DocumentError(f"{name} is a binary file, not a text document")
    try:
        return data.decode("utf-8"), "UTF-8"
    except UnicodeDecodeError:
        pass
    if not _mostly_text(data):
        raise DocumentError(f"{name} is a binary file, not a text document")
    text = "".join(_cp1252_or_latin1(data))
    return text, "Windows-1252"


def _cp1252_or_latin1(data: bytes) -> list[str]:
    """Windows-1252 where it defines the byte, Latin-1 where it does not (0x81, 0x8d, 0x8f, 0x90, 0x9d)."""
    return [bytes([b]).decode("cp1252", "strict") if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D) else chr(b) for b in data]


def _mostly_text(data: bytes) -> bool:
    """True when under 5% of the first 4 KB are control bytes other than tab, newlines and form feed."""
    sample = data[:4096]
    if not sample:
        return True
    controls = sum(1 for b in sample if b < 32 and b not in (9, 10, 12, 13))
    return controls * 20 < len(sample)


class _TextOfHtml(HTMLParser):
    """An HTML page's visible text: scripts and styles left out, blocks on lines of their own."""

    _BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "pre", "table"}
    _HIDDEN = {"script", "style", "head", "template", "noscript"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._HIDDEN:
            self._hidden += 1
        elif tag in self._BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._HIDDEN:
            self._hidden = max(0, self._hidden - 1)
        elif tag in self._BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """The visible text of an HTML page, one block a line (spaces within a block folded to one)."""
    parser = _TextOfHtml()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)


def check_zip(name: str, data: bytes) -> None:
    """Refuse an office file (a zip) whose parts unzip to more than the limit, before anything is unzipped."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unzipped = sum(max(0, info.file_size) for info in archive.infolist())
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise DocumentError(f"{name} is damaged: it is not a readable office file ({exc})") from None
    if unzipped > MAX_UNZIPPED_BYTES or unzipped > MAX_ZIP_RATIO * max(len(data), 1):
        raise DocumentError(
            f"{name} would unzip to {human_size(unzipped)} from {human_size(len(data))}; refused as a possible zip bomb"
        )


def markitdown_available() -> bool:
    """True when the optional ``[documents]`` extra (markitdown) is installed."""
    try:
        import markitdown  # noqa: F401
    except ImportError:
        return False
    return True


MISSING_EXTRA = "pip install 'specchat[documents]'"


def _converted(name: str, data: bytes, suffix: str) -> tuple[str, str]:
    """A PDF or office file's text through markitdown; every failure is one line."""
    kind = CONVERTED[suffix]
    if suffix in _ZIPPED:
        check_zip(name, data)
    elif not data.startswith(b"%PDF-"):
        raise DocumentError(f"{name} is not a PDF (it does not start as one)")
    elif b"/Encrypt" in data:
        raise DocumentError(f"{name} is an encrypted (password-protected) PDF; attach an unprotected copy")
    try:
        from markitdown import MarkItDown, StreamInfo
    except ImportError:
        raise DocumentError(
            f"{name}: reading {kind} files needs the optional documents extra ({MISSING_EXTRA})"
        ) from None
    try:
        result = MarkItDown(enable_plugins=False).convert_stream(
            io.BytesIO(data), stream_info=StreamInfo(extension=suffix, filename=name)
        )
    except Exception as exc:  # noqa: BLE001 - each converter raises its own kinds (pdfminer's, zipfile's, lxml's...)
        reason = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise DocumentError(f"{name} could not be read as {kind}: {reason}") from None
    return result.text_content or "", kind
