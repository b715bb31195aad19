"""A test module's test_* functions run without pytest: what python_cuda.sh uses on a GPU machine whose interpreter
has a CUDA torch but no pytest. Not pytest: no collection beyond one module's namespace, no parametrize, no
assertion rewriting (a failure prints the traceback and the assert's own message); the only fixture it supplies is
tmp_path (a fresh directory, removed afterwards). A module's autouse fixture, a generator function, is passed as
@fixture: as under pytest, its code up to the yield runs before every test and the rest after it, pass or fail.

    sys.exit(plain_runner.run(globals(), fixture=_fixture, only=sys.argv[1:]))

Returns 0 when every test passed, 1 when one failed or an unknown name was asked for, 5 (pytest's "no tests
collected") when there was nothing to run.
"""
import inspect
import pathlib
import shutil
import sys
import tempfile
import time
import traceback

FIXTURES = ("tmp_path",)


def _teardown(gen):
    """The rest of an autouse fixture after its yield."""
    try:
        next(gen)
    except StopIteration:
        return
    raise RuntimeError("the autouse fixture yielded more than once")


def run(namespace, fixture=None, only=()):
    """Run the test_* functions of @namespace (a module's globals()) in definition order, or only those named in
    @only; each between @fixture's setup and teardown when given. Prints PASS/FAIL per test and a summary."""
    tests = [(n, f) for n, f in namespace.items() if n.startswith("test_") and inspect.isfunction(f)]
    unknown = [n for n in only if n not in dict(tests)]
    if unknown:
        print("plain_runner: no test named %s; there are: %s" % (", ".join(unknown), ", ".join(n for n, _ in tests)))
        return 1
    if only:
        tests = [(n, f) for n, f in tests if n in only]
    if not tests:
        print("plain_runner: no tests to run")
        return 5
    failed = []
    for name, fn in tests:
        params = list(inspect.signature(fn).parameters)
        bad = [p for p in params if p not in FIXTURES]
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="zo-%s-" % name)) if "tmp_path" in params else None
        t0 = time.monotonic()
        try:
            if bad:
                raise TypeError("%s takes %s: plain_runner supplies only %s" % (name, ", ".join(bad),
                                                                                 ", ".join(FIXTURES)))
            gen = fixture() if fixture else None
            if gen:
                next(gen)
            try:
                fn(**({"tmp_path": tmp} if tmp else {}))
            finally:
                if gen:
                    _teardown(gen)
        except Exception:  # a failing test is reported and the next one runs, as under pytest
            traceback.print_exc()
            failed.append(name)
            print("FAIL %s (%.1f s)" % (name, time.monotonic() - t0))
        else:
            print("PASS %s (%.1f s)" % (name, time.monotonic() - t0))
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
        sys.stdout.flush()
    print("plain_runner: %d passed, %d failed%s" % (len(tests) - len(failed), len(failed),
                                                    (": " + ", ".join(failed)) if failed else ""))
    return 1 if failed else 0
