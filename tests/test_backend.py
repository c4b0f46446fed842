"""peakbench.backend: a backend's vendor package that is missing, or fails as it loads, is one
BackendUnavailable line that says how to install it; an interrupt is not taken for either."""
from __future__ import annotations

import pytest

from peakbench.backend import BackendUnavailable, vendor_import


def test_a_missing_vendor_package_names_the_package_and_the_install():
    with pytest.raises(BackendUnavailable) as e:
        with vendor_import("cuda", "cupy", "CuPy", "pip install 'peakbench[cuda]'"):
            import peakbench_no_such_vendor_package  # noqa: F401
    assert str(e.value) == "cuda backend: Python package 'cupy' is not installed (pip install 'peakbench[cuda]')"
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_a_vendor_package_that_fails_as_it_loads_says_its_first_line():
    with pytest.raises(BackendUnavailable) as e:
        with vendor_import("rocm", "hip-python", "hip-python", "pip install hip-python"):
            raise OSError("libamdhip64.so.6: cannot open shared object file\nsecond line")
    assert str(e.value) == "rocm backend: hip-python cannot load: libamdhip64.so.6: cannot open shared object file"


def test_an_interrupt_while_importing_is_not_a_missing_package():
    with pytest.raises(KeyboardInterrupt):
        with vendor_import("cuda", "cupy", "CuPy", "pip install cupy"):
            raise KeyboardInterrupt


def test_each_calls_every_step_and_raises_the_first_error_it_catches():
    from peakbench.backend import each
    called = []

    def step(name, error=None):
        def run():
            called.append(name)
            if error:
                raise error
        return run
    with pytest.raises(KeyError, match="first"):
        each([step("a"), step("b", KeyError("first")), step("c", ValueError("second")), step("d")])
    assert called == ["a", "b", "c", "d"]
    called.clear()
    with pytest.raises(ValueError):            # not what it catches: raised at once, the rest not called
        each([step("a", ValueError("other")), step("b")], catch=KeyError)
    assert called == ["a"]
    each([])
