"""The site hook's after-import hooks (popdist_launcher._startup.after_import): a hook runs once,
right after its module's code has run, also when the module was first only looked up."""
import subprocess
import sys
import textwrap


def _run(code: str, tmp_path) -> str:
    (tmp_path / "hooked_mod.py").write_text("VALUE = 41\n")
    (tmp_path / "hook_fns.py").write_text(textwrap.dedent("""
        CALLS = []
        def bump(module):
            CALLS.append(module.__name__)
            module.VALUE += 1
    """))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_hook_runs_once_after_the_module_is_complete(tmp_path):
    out = _run("""
        from popdist_launcher._startup import after_import
        after_import("hooked_mod", "hook_fns:bump")
        import hooked_mod, importlib, hook_fns
        importlib.reload(hooked_mod)
        print(hook_fns.CALLS, hooked_mod.VALUE)
    """, tmp_path)
    assert out == "['hooked_mod'] 41"  # ran once on import; a reload re-executes the code only


def test_hook_survives_an_existence_check(tmp_path):
    out = _run("""
        import importlib.util
        from popdist_launcher._startup import after_import
        after_import("hooked_mod", "hook_fns:bump")
        assert importlib.util.find_spec("hooked_mod") is not None
        import hooked_mod, hook_fns
        print(hook_fns.CALLS, hooked_mod.VALUE)
    """, tmp_path)
    assert out == "['hooked_mod'] 42"


def test_hook_on_an_imported_module_runs_at_once(tmp_path):
    out = _run("""
        import hooked_mod
        from popdist_launcher._startup import after_import
        after_import("hooked_mod", "hook_fns:bump")
        import hook_fns
        print(hook_fns.CALLS, hooked_mod.VALUE)
    """, tmp_path)
    assert out == "['hooked_mod'] 42"
