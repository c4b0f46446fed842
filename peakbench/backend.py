"""The backend interface: what the core asks of a GPU API, and how a backend is loaded.

The core (CLI, harness, catalog, specs, reports) imports no GPU API. A backend is a subpackage
(`peakbench.vulkan`, `peakbench.cuda`, `peakbench.rocm`) imported only when asked for; a missing
package or driver becomes BackendUnavailable with a hint, never a traceback.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import os
import re
from dataclasses import dataclass, field
from typing import Protocol

from peakbench.catalog import TestSpec
from peakbench.workload import Workload

BACKENDS = ("vulkan", "cuda", "rocm")


class BackendUnavailable(Exception):
    """The backend cannot run here: its package, its driver or the device is missing."""


class Unsupported(Exception):
    """No native path for a test on this device; the message starts with [category]."""


def first_line(e: BaseException) -> str:
    """The first line of an exception's message, or its type where it says nothing; a bytes
    value a C library's wrapper formatted into it (`'b'libamdhip64.so''`) reads as text."""
    text = str(e).strip().splitlines()
    return _bytes_shown.sub(r"\2", text[0]) if text else type(e).__name__


_bytes_shown = re.compile(r"""\bb(['"])(.*?)\1""")


@contextlib.contextmanager
def vendor_import(backend: str, package: str, title: str, install: str):
    """Around a backend's import of its vendor package: a package that is missing, or that fails
    as it loads (a wheel for another driver version), is BackendUnavailable saying so and how to
    install it."""
    try:
        yield
    except ImportError:
        raise BackendUnavailable(f"{backend} backend: Python package '{package}' is not installed ({install})") from None
    except Exception as e:
        raise BackendUnavailable(f"{backend} backend: {title} cannot load: {first_line(e)}") from None


def error_text(e: BaseException) -> str:
    """An exception's message for a person. C libraries and subprocesses hand over bytes, and the
    default str() of an exception carrying bytes (or of an OSError with a bytes file name) shows
    b'...': those are decoded instead."""
    if isinstance(e, OSError) and e.strerror:
        names = [os.fsdecode(f) if isinstance(f, (str, bytes)) else str(f)
                 for f in (e.filename, e.filename2) if f is not None]
        return ": ".join([e.strerror, *names])
    if type(e).__str__ is BaseException.__str__ and any(isinstance(a, (bytes, bytearray)) for a in e.args):
        return ", ".join(bytes(a).decode(errors="replace") if isinstance(a, (bytes, bytearray)) else str(a)
                         for a in e.args)
    return str(e)


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    vendor_id: int
    device_id: int
    driver: str
    api: str
    uuid: str
    kind: str = "gpu"              # gpu, integrated, cpu, virtual, other
    units: int | None = None       # SMs / CUs when the API reveals them
    extra: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"index": self.index, "name": self.name, "vendor_id": f"0x{self.vendor_id:04x}",
                "device_id": f"0x{self.device_id:04x}", "driver": self.driver, "api": self.api,
                "uuid": self.uuid, "type": self.kind, "units": self.units, **self.extra}


def release_on_failure(init):
    """For a workload's __init__: when building it fails part-way (an allocation, a compile, the
    first launch), close() what was made before the error goes on, so a failed variant does not
    keep its buffers (on a GPU, gigabytes) from the next one."""
    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        try:
            init(self, *args, **kwargs)
        except BaseException:
            try:
                self.close()
            except Exception:
                pass
            raise
    return wrapper


def each(steps, catch: type | tuple = Exception) -> None:
    """Call every step (a function of no arguments), each even when one before it raised `catch`;
    then raise the first such error: a close() that releases all it can."""
    errors = []
    for step in steps:
        try:
            step()
        except catch as e:
            errors.append(e)
    if errors:
        raise errors[0]


def release(obj, free, *names: str) -> None:
    """free() each named resource of `obj` that exists and is not None, then forget it: a close()
    that is safe on a half-built workload and safe to call twice."""
    for name in names:
        resource = getattr(obj, name, None)
        if resource is not None:
            setattr(obj, name, None)
            free(resource)


class Device(Protocol):
    info: DeviceInfo

    def prepare(self, test: TestSpec, variant, spec=None) -> Workload:
        """Build the kernel for one variant (measured by the runner alone: nothing is timed
        here); raises Unsupported with a [category] reason. `spec`, the device's spec entry,
        gives the cache sizes an API may not report."""

    def support(self, test: TestSpec) -> str | None:
        """None when the test can run here, else the unsupported reason ([category] sentence)."""

    def variants(self, test: TestSpec) -> tuple:
        """The variants to run: the catalog's, or what the device offers (matrix shapes)."""

    def clock_mhz(self) -> float | None:
        """The current core clock, where the platform can read it."""

    def close(self) -> None: ...


class Enumerated:
    """A backend whose devices were listed when it started (`_infos`), with nothing to release."""
    _infos: list

    def devices(self) -> list[DeviceInfo]:
        return list(self._infos)

    def close(self) -> None:
        pass


class Backend(Protocol):
    name: str

    def devices(self) -> list[DeviceInfo]: ...
    def open(self, index: int) -> Device: ...
    def close(self) -> None: ...


def load(name: str) -> Backend:
    """Import and start a backend by name; BackendUnavailable says why it cannot and how to fix it."""
    if name not in BACKENDS:
        raise BackendUnavailable(f"unknown backend '{name}' (choose from {', '.join(BACKENDS)})")
    try:
        module = importlib.import_module(f"peakbench.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"peakbench.{name}":
            raise
        raise BackendUnavailable(f"{name} backend: not part of this peakbench release yet") from None
    create = getattr(module, "create", None)
    if create is None:   # a leftover folder imports as an empty namespace package
        raise BackendUnavailable(f"{name} backend: not part of this peakbench release yet")
    return create()

