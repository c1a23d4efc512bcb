"""Every file gatepack reads or writes goes through here, under three rules.

* **Outputs** (``prepare_output`` + ``atomic_path`` / ``atomic_files``): the output is never an input,
  never inside one and never a parent of one; an existing output is replaced only when it is an
  artifact of the same kind (recognised by its marker file or suffix); a failed run leaves nothing
  behind; an OS error on the output path is a usage error naming it.
* **Paths read from inside an artifact** (``contained_file``): relative, resolved inside the
  artifact's own directory, and a regular file, checked before anything is opened.
* **Reading**: only regular files are opened (a FIFO or a device would block or never end), with
  ``O_NONBLOCK`` so that even a file swapped for a FIFO after the check cannot hang; sizes declared
  inside a file (``.npy`` headers, ``.npz`` members, JSON) are checked against the bytes really
  present before anything is allocated; reading never writes.
"""

from __future__ import annotations

import contextvars
import json
import mmap
import os
import shutil
import stat
import tempfile
import zipfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Iterable, Iterator, Mapping

from gatepack.converters.errors import InputError, UsageError

if TYPE_CHECKING:
    import numpy as np

MAX_JSON_BYTES = 64 << 20  # a manifest larger than this is not one gatepack wrote or can use
MAX_NPZ_BYTES = 4 << 30  # the decompressed size of all tensors of one `run --inputs` file
NUMERIC_KINDS = "biufc"  # NumPy dtype kinds of the arrays gatepack reads (bool, integers, floats, complex)


def _squash(err: object, limit: int = 160) -> str:
    return " ".join(str(err).split())[:limit]


# ------------------------------------------------------------------------------------- reading


_OPENED: contextvars.ContextVar[set[Path] | None] = contextvars.ContextVar("gatepack_opened", default=None)


@contextmanager
def track_reads() -> Iterator[set[Path]]:
    """Collect the resolved paths of every file opened through this module inside the block (so a
    command can refuse an output that is one of the files its input was read from)."""
    opened: set[Path] = set()
    token = _OPENED.set(opened)
    try:
        yield opened
    finally:
        _OPENED.reset(token)


def _record(path: Path) -> None:
    opened = _OPENED.get()
    if opened is not None:
        opened.add(Path(path).resolve())


def regular_file(path: str | Path, what: str | None = None) -> Path:
    """``path`` if it names a regular file (symbolic links followed); InputError naming it otherwise."""
    path = Path(path)
    label = f"{what}: " if what else ""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"{label}{path}: no such file") from None
    except OSError as err:
        raise InputError(f"{label}{path}: cannot be read ({err.strerror or _squash(err)})") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise InputError(f"{label}{path}: is {kind}; gatepack reads regular files only")
    return path


def open_regular(path: str | Path, what: str | None = None):
    """Open a regular file for binary reading without ever blocking on a FIFO or a device."""
    path = regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as err:
        raise InputError(f"{path}: cannot be read ({err.strerror or _squash(err)})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped after the check
        os.close(fd)
        raise InputError(f"{path}: is not a regular file; gatepack reads regular files only")
    _record(path)
    return os.fdopen(fd, "rb")


def read_bytes(path: str | Path, what: str | None = None, limit: int | None = None) -> bytes:
    """The contents of a regular file; InputError if it is larger than ``limit`` bytes."""
    with open_regular(path, what) as handle:
        size = os.fstat(handle.fileno()).st_size
        if limit is not None and size > limit:
            raise InputError(f"{path}: {size} bytes is more than gatepack reads for such a file ({limit})")
        return handle.read()


def map_regular(path: str | Path, what: str | None = None) -> mmap.mmap | bytes:
    """A regular file memory-mapped for reading: its pages load as they are used and are the page cache's own (no
    copy of a large file in this process's memory); b"" for an empty file (which cannot be mapped). The file must
    not shrink while the map is used (gatepack replaces its outputs by renaming, never in place)."""
    with open_regular(path, what) as handle:
        if not os.fstat(handle.fileno()).st_size:
            return b""
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


def parse_json(text: str | bytes, where: str) -> object:
    """JSON parsed, with any failure (deep nesting included) an InputError naming ``where``."""
    try:
        return json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise InputError(f"{where}: not valid JSON ({_squash(err)})") from None


def read_json(path: str | Path, what: str | None = None) -> object:
    """A JSON file (regular, at most ``MAX_JSON_BYTES``), parsed with ``parse_json``."""
    return parse_json(read_bytes(path, what, MAX_JSON_BYTES), str(path))


def contained_file(root: str | Path, relative: object, where: str) -> Path:
    """The regular file ``relative`` names inside the directory ``root``, resolved.

    A path read from inside an artifact must stay inside it: absolute paths, ``..`` and symbolic
    links leading out of ``root`` are refused, and so is anything but a regular file.
    """
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise InputError(f"{where}: {relative!r} is not a file path")
    if Path(relative).is_absolute() or Path(relative).drive:
        raise InputError(f"{where}: {relative!r} is an absolute path; paths inside an artifact are relative to it")
    base = Path(root).resolve()
    try:
        resolved = (base / relative).resolve()
    except (OSError, RuntimeError) as err:
        raise InputError(f"{where}: {relative!r} cannot be resolved ({_squash(err)})") from None
    if not resolved.is_relative_to(base):
        raise InputError(f"{where}: {relative!r} leads outside the artifact ({base})")
    return regular_file(resolved, where)


# ------------------------------------------------------------------------------------- .npy / .npz


def _npy_header(handle, where: str) -> "tuple[tuple[int, ...], bool, np.dtype]":
    import numpy as np

    fmt = np.lib.format
    try:
        version = fmt.read_magic(handle)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(handle, max_header_size=1 << 16)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = fmt.read_array_header_2_0(handle, max_header_size=1 << 16)
        else:
            raise ValueError(f"version {version} is not 1.0, 2.0 or 3.0")
    except Exception as err:  # NumPy's header parser raises ValueError, SyntaxError, tokenize.TokenError...
        raise InputError(f"{where}: not a readable .npy file ({type(err).__name__}: {_squash(err)})") from None
    if dtype.hasobject:
        raise InputError(f"{where}: holds Python objects (dtype {dtype}); gatepack never unpickles")
    if dtype.kind not in NUMERIC_KINDS or dtype.names is not None or dtype.subdtype is not None:
        raise InputError(f"{where}: holds {dtype}, not numbers; gatepack reads plain numeric arrays only")
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        raise InputError(f"{where}: its header declares shape {shape!r}, not a tuple of sizes")
    return tuple(shape), fortran, dtype


def _declared_bytes(shape: tuple[int, ...], dtype: "np.dtype") -> int:
    count = 1
    for dim in shape:
        count *= int(dim)  # Python ints: no overflow for absurd headers
    return count * dtype.itemsize


def load_npy(path: str | Path, where: str | None = None) -> "np.ndarray":
    """A ``.npy`` file as a read-only memory map, its header checked against the file's size first."""
    import numpy as np

    where = where or str(path)
    with open_regular(path, where) as handle:
        shape, fortran, dtype = _npy_header(handle, where)
        offset = handle.tell()
        present = os.fstat(handle.fileno()).st_size - offset
    declared = _declared_bytes(shape, dtype)
    if declared != present:
        raise InputError(
            f"{where}: its header declares shape {list(shape)} of {dtype} ({declared} bytes) but the file holds "
            f"{present} bytes of data"
        )
    if declared == 0:
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")


def release_pages(array: "np.ndarray") -> None:
    """Drop ``array``'s pages from this process's resident memory when it lies in a memory map of a file opened for
    reading (``np.memmap`` mode ``r``, or ``c`` for the pages this process never wrote): ``MADV_DONTNEED`` on the
    whole pages it spans. The file's pages stay in the page cache and a later read maps them again, the same bytes;
    so a large weight read once (quantized) holds memory only while it is read. Nothing for any other array (in
    memory, written, not contiguous), nor where the system does not tell which pages were written."""
    import numpy as np

    mapped = _file_map(array)
    if mapped is None or not hasattr(mmap, "MADV_DONTNEED") or not array.flags.c_contiguous or not array.nbytes:
        return
    memory, mode = mapped
    base = np.frombuffer(memory, np.uint8, 1).__array_interface__["data"][0]
    start = array.__array_interface__["data"][0] - base
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE  # only the pages wholly inside the array
    last = (start + array.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first and (mode == "r" or _unwritten(base + first, last - first)):
        memory.madvise(mmap.MADV_DONTNEED, first, last - first)


def _file_map(array: object) -> "tuple[mmap.mmap, str] | None":
    """The ``mmap.mmap`` under ``array`` (following its bases) and the mode of the ``np.memmap`` over it (``r``:
    read-only, ``c``: copy-on-write), else None."""
    mode = None
    while array is not None and not isinstance(array, mmap.mmap):
        mode = getattr(array, "mode", mode)
        array = getattr(array, "base", None)
    if not isinstance(array, mmap.mmap) or array.closed or mode not in ("r", "c"):
        return None
    return array, mode


def _unwritten(address: int, length: int) -> bool:
    """Whether this process wrote none of the pages of a private file mapping in ``[address, address + length)``
    (page-aligned): ``/proc/self/pagemap`` flags a page ``file`` (bit 61) while it is the file's own, and a written
    one is a private copy (present, bit 63, without bit 61) or swapped (bit 62); False where it cannot be read."""
    import numpy as np

    count = length // mmap.PAGESIZE
    try:
        with open("/proc/self/pagemap", "rb") as pagemap:
            pagemap.seek(address // mmap.PAGESIZE * 8)
            flags = np.frombuffer(pagemap.read(count * 8), "<u8")
    except OSError:
        return False
    present, swapped, of_file = ((flags >> np.uint64(bit)) & np.uint64(1) for bit in (63, 62, 61))
    return flags.size == count and not swapped.any() and not (present & (of_file ^ np.uint64(1))).any()


def write_npz(handle: BinaryIO, arrays: "Mapping[str, np.ndarray]") -> None:
    """``arrays`` as an ``.npz`` archive (what ``np.savez`` writes: one ``NAME.npy`` member each, stored), with
    every name kept: ``np.savez(handle, **arrays)`` would take an array named ``allow_pickle`` for its flag and
    refuse one named ``file``."""
    import numpy as np

    with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, value in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)


def load_npz(path: str | Path, allowed: Iterable[str] | None = None) -> "dict[str, np.ndarray]":
    """The arrays of an ``.npz`` file named in ``allowed`` (all if None; others, such as expected
    outputs kept beside the inputs, are never decompressed). Every such member's header and size are
    checked before any is decompressed; together they may not exceed ``MAX_NPZ_BYTES``."""
    import numpy as np

    where = str(path)
    allowed = None if allowed is None else list(allowed)
    try:
        with open_regular(path) as handle, zipfile.ZipFile(handle) as archive:  # (the error names the path)
            members = [m for m in archive.infolist() if not m.is_dir()]
            members = [m for m in members if allowed is None or m.filename.removesuffix(".npy") in allowed]
            total = 0
            for member in members:
                at = f"{where}: array {member.filename.removesuffix('.npy')!r}"
                with archive.open(member) as stream:
                    shape, _, dtype = _npy_header(stream, at)
                    declared, present = _declared_bytes(shape, dtype), member.file_size - stream.tell()
                if declared != present:
                    raise InputError(f"{at}: its header declares {declared} bytes of data, the archive holds {present}")
                total += declared
                if total > MAX_NPZ_BYTES:
                    raise InputError(
                        f"{where}: its arrays decompress to more than {MAX_NPZ_BYTES >> 30} GiB, gatepack's limit "
                        "for run inputs"
                    )
            handle.seek(0)
            with np.load(handle, allow_pickle=False) as data:
                return {k: data[k] for k in data.files if allowed is None or k in allowed}
    except zipfile.BadZipFile as err:
        raise InputError(f"{where}: not a readable .npz file ({_squash(err)})") from None
    except (OSError, ValueError, EOFError) as err:
        raise InputError(f"{where}: not a readable .npz file ({_squash(err)})") from None


# ------------------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class OutputKind:
    """What an output is, so that an existing one is replaced only when it is of the same kind."""

    title: str  # e.g. "BNNS bundle", "report"
    is_directory: bool
    recognise: Callable[[Path], bool]  # True when an existing path is such an artifact
    companions: tuple[str, ...] = ()  # suffixes of files that belong to it (.bin beside .xml)


def is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def has_suffix(*suffixes: str) -> Callable[[Path], bool]:
    return lambda p: is_regular(p) and p.name.lower().endswith(tuple(s.lower() for s in suffixes))


def has_markers(*names: str) -> Callable[[Path], bool]:
    return lambda p: p.is_dir() and all(is_regular(p / n) for n in names)


def starts_with(marker: bytes, suffix: str) -> Callable[[Path], bool]:
    """A regular file with ``suffix`` whose first 4 KiB contain ``marker``."""

    def recognise(p: Path) -> bool:
        if not has_suffix(suffix)(p):
            return False
        try:
            with open_regular(p) as handle:
                return marker in handle.read(4096)
        except InputError:
            return False

    return recognise


def has_identifier(identifier: bytes, suffix: str) -> Callable[[Path], bool]:
    """A regular file with ``suffix`` whose bytes 4..8 are the flatbuffer file ``identifier`` (``TFL3``)."""

    def recognise(p: Path) -> bool:
        if not has_suffix(suffix)(p):
            return False
        try:
            with open_regular(p) as handle:
                return handle.read(8)[4:8] == identifier
        except InputError:
            return False

    return recognise


def starts_like_protobuf(suffix: str, first_tags: bytes) -> Callable[[Path], bool]:
    """A regular file with ``suffix`` whose first byte is one of ``first_tags`` (protobuf field tags):
    enough to tell a serialised message from text or another file that merely has the suffix."""

    def recognise(p: Path) -> bool:
        if not has_suffix(suffix)(p):
            return False
        try:
            with open_regular(p) as handle:
                first = handle.read(1)
        except InputError:
            return False
        return len(first) == 1 and first[0] in first_tags

    return recognise


def _companion(path: Path, suffix: str) -> Path:
    return path.with_suffix(suffix)


def _relation(output: Path, source: Path) -> str | None:
    if output == source or (output.exists() and source.exists() and os.path.samefile(output, source)):
        return "is"  # samefile: the same file under another spelling (case-insensitive file systems)
    if output.is_relative_to(source):
        return "is inside"
    if source.is_relative_to(output):
        return "contains"
    return None


def prepare_output(output: str | Path, kind: OutputKind, inputs: Iterable[str | Path] = ()) -> Path:
    """Check ``output`` against the output policy (module docstring) before anything is read or written.

    Raises UsageError naming the path when the output is, is inside, or contains an input; when it is
    a symbolic link; or when something that is not a ``kind`` artifact (or a companion file without
    its artifact) is in the way.
    """
    output = Path(output)
    if not str(output) or output.name in ("", ".", ".."):
        raise UsageError(f"{output}: not a usable output path", hint="name the file or directory to write")
    with _output_errors(output):
        _check_output(output, kind, inputs)
    return output


def _check_output(output: Path, kind: OutputKind, inputs: Iterable[str | Path]) -> None:
    resolved = output.resolve()
    paths = [(output, resolved)] + [(_companion(output, c), _companion(resolved, c)) for c in kind.companions]
    for given in inputs:
        source = Path(given).resolve()
        for shown, candidate in paths:
            relation = _relation(candidate, source)
            if relation:
                raise UsageError(
                    f"{shown}: the output {relation} the input {given}; gatepack never writes over what it reads",
                    hint="choose another -o path",
                )
    if output.is_symlink():
        raise UsageError(
            f"{output}: is a symbolic link; gatepack replaces only real files and directories",
            hint="remove the link or choose another -o path",
        )
    if output.exists() or os.path.lexists(output):
        if not kind.recognise(output):
            what = "directory" if output.is_dir() else "file"
            raise UsageError(
                f"{output}: an existing {what} that gatepack does not recognise as {kind.title}; it replaces only "
                "an artifact of the same kind",
                hint="remove it or choose another -o path",
            )
    else:
        for shown, _ in paths[1:]:
            if os.path.lexists(shown):
                raise UsageError(
                    f"{shown}: exists without the {kind.title} {output.name} it would belong to; gatepack does not "
                    "replace it",
                    hint="remove it or choose another -o path",
                )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def _output_errors(target: Path) -> Iterator[None]:
    """OS errors on the output path become usage errors naming it."""
    try:
        yield
    except OSError as err:
        name = err.filename if err.filename else target
        raise UsageError(
            f"{target}: cannot write the output ({err.strerror or _squash(err)}: {name})",
            hint="check the -o path: its folder, permissions and name",
        ) from None


def _make_parent(target: Path) -> list[Path]:
    """Create the missing folders above ``target``; returns them, outermost first (to undo)."""
    missing = []
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise UsageError(f"{target}: its folder {parent} is a file", hint="choose another -o path")
    if any(folder.name in ("..", ".") for folder in missing):  # 'missing/..' exists only once 'missing' is made
        raise UsageError(f"{target}: its folder {target.parent} does not exist", hint="choose another -o path")
    made: list[Path] = []
    try:
        for folder in reversed(missing):
            folder.mkdir()
            made.append(folder)
    except OSError:
        _undo_parents(made)
        raise
    return made


def _undo_parents(created: list[Path]) -> None:
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            break


def _discard(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def atomic_path(target: Path, *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; move it onto ``target`` only if the block succeeds.

    With ``directory=True`` the temporary path is a fresh directory and an existing ``target``
    directory is replaced whole (moved aside first, removed only once the new one is in place).
    Call ``prepare_output`` first: this does not judge whether ``target`` may be replaced.
    """
    target = Path(target)
    created: list[Path] = []
    tmp: Path | None = None
    try:
        with ExitStack() as claim:  # tmp's lock: a killed run's tmp is removed by the next run (_remove_abandoned)
            with _output_errors(target):
                created = _make_parent(target)
                tmp = claim.enter_context(_claimed_temporary(target.parent, f".{target.name}.", directory=directory))
                tmp.chmod((0o777 if directory else 0o666) & ~_umask())
            yield tmp
            with _output_errors(target):
                if directory and target.is_dir() and not target.is_symlink():
                    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
                    try:
                        os.replace(target, aside / "old")
                        try:
                            os.replace(tmp, target)
                        except OSError:
                            os.replace(aside / "old", target)  # put the old artifact back
                            raise
                    finally:
                        shutil.rmtree(aside, ignore_errors=True)
                else:
                    os.replace(tmp, target)
    except BaseException:
        if tmp is not None:
            _discard(tmp)
        _undo_parents(created)
        raise


LOCK_SUFFIX = ".lock"  # a run's temporary entry X has its lock file X.lock beside it


def _lock(file: Path, *, wait: bool, create: bool = False) -> int | None:
    """An exclusive advisory lock on ``file`` (its descriptor), held until the descriptor is closed; None
    when another process holds it (``wait=False``), the file is gone, or the platform has no ``fcntl``
    (nothing is then cleaned). The kernel releases the lock of a process that dies, however it dies."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        fd = os.open(file, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | (os.O_CREAT if create else 0), 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        os.close(fd)
        return None
    return fd


def _remove_abandoned(parent: Path, prefix: str) -> None:
    """Remove the temporary entries ``prefix*.tmp`` in ``parent`` whose lock file (``.tmp.lock``) no
    process holds: their run was killed before it could remove them. Entries without a lock file are
    never touched."""
    try:
        locks = [p for p in parent.iterdir() if p.name.startswith(prefix) and p.name.endswith(".tmp" + LOCK_SUFFIX)]
    except OSError:
        return
    for lock in locks:
        if lock.is_symlink() or not is_regular(lock):
            continue
        fd = _lock(lock, wait=False)
        if fd is None:
            continue
        try:
            _discard(lock.with_name(lock.name.removesuffix(LOCK_SUFFIX)))
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)


@contextmanager
def _claimed_temporary(parent: Path, prefix: str, *, directory: bool) -> Iterator[Path]:
    """A fresh temporary entry ``prefix*.tmp`` in ``parent`` (a directory, or an empty file), with its
    lock file held until the block ends; abandoned entries of the same prefix are removed first. The
    lock file is locked before the entry exists, so no run takes a live entry for an abandoned one.
    The entry itself is the caller's to move or remove; the lock file is removed here."""
    _remove_abandoned(parent, prefix)
    fd, lock_name = tempfile.mkstemp(prefix=prefix, suffix=".tmp" + LOCK_SUFFIX, dir=parent)
    os.close(fd)
    lock = Path(lock_name)
    held = _lock(lock, wait=True)
    try:
        entry = lock.with_name(lock.name.removesuffix(LOCK_SUFFIX))
        if directory:
            entry.mkdir()
        else:
            os.close(os.open(entry, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        yield entry
    finally:
        lock.unlink(missing_ok=True)
        if held is not None:
            os.close(held)


@contextmanager
def staging_directory(parent: str | Path, prefix: str) -> Iterator[Path]:
    """A fresh hidden folder ``prefix*.tmp`` in ``parent`` for one run's temporary files (a framework's
    intermediate package), removed when the block ends, however it ends; a later run removes the
    folders that killed runs left (``_claimed_temporary``)."""
    parent = Path(parent)
    with ExitStack() as claim:
        with _output_errors(parent):
            folder = claim.enter_context(_claimed_temporary(parent, prefix, directory=True))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def atomic_files(target: Path, companions: tuple[str, ...] = ()) -> Iterator[Path]:
    """Like ``atomic_path`` for an artifact made of ``target`` plus files with the same stem and the
    ``companions`` suffixes (e.g. an OpenVINO ``.xml`` and its ``.bin``, an ONNX model's
    ``.onnx.data``): the block writes ``tmp/target.name`` (and its companions) in a temporary
    directory; on success the companions move into place first, the target last. A companion the
    block did not write is optional: a stale one beside the target is removed."""
    target = Path(target)
    created: list[Path] = []
    tmp: Path | None = None
    try:
        with ExitStack() as claim:  # as in atomic_path
            with _output_errors(target):
                created = _make_parent(target)
                tmp = claim.enter_context(_claimed_temporary(target.parent, f".{target.name}.", directory=True))
            yield tmp / target.name
            with _output_errors(target):
                for suffix in companions:
                    written, final = tmp / target.with_suffix(suffix).name, target.with_suffix(suffix)
                    if written.exists():
                        os.replace(written, final)
                    elif is_regular(final):
                        final.unlink()
                os.replace(tmp / target.name, target)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        _undo_parents(created)
        raise
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
