"""The site hook (popdist_launcher.compat.startup): its after-import hooks (a hook runs once, right
after its module's code has run, also when the module was first only looked up), the import
table it applies, and how it tells an IPU program from its source
(popdist_launcher.compat.ipu_program)."""
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
        from popdist_launcher.compat.startup import after_import
        after_import("hooked_mod", "hook_fns:bump")
        import hooked_mod, importlib, hook_fns
        importlib.reload(hooked_mod)
        print(hook_fns.CALLS, hooked_mod.VALUE)
    """, tmp_path)
    assert out == "['hooked_mod'] 41"  # ran once on import; a reload re-executes the code only


def test_hook_survives_an_existence_check(tmp_path):
    out = _run("""
        import importlib.util
        from popdist_launcher.compat.startup import after_import
        after_import("hooked_mod", "hook_fns:bump")
        assert importlib.util.find_spec("hooked_mod") is not None
        import hooked_mod, hook_fns
        print(hook_fns.CALLS, hooked_mod.VALUE)
    """, tmp_path)
    assert out == "['hooked_mod'] 42"


def test_hook_on_an_imported_module_runs_at_once(tmp_path):
    out = _run("""
        import hooked_mod
        from popdist_launcher.compat.startup import after_import
        after_import("hooked_mod", "hook_fns:bump")
        import hook_fns
        print(hook_fns.CALLS, hooked_mod.VALUE)
    """, tmp_path)
    assert out == "['hooked_mod'] 42"


# -- the import table (popdist_launcher.compat.import_table) and what the finder makes of it

def test_the_most_specific_entry_answers_first():
    from popdist_launcher.compat import import_table as table
    on = {"ipu-alias", "keras-2", "tf-keras"}
    nn_ops = table.aliases_for("tensorflow.python.ipu.nn_ops", on)
    assert [a.target for a in nn_ops] == ["popdist_launcher.ipu.ops.nn_ops", "popdist_launcher.ipu"]
    keras = [(a.target, a.shadows) for a in table.aliases_for("keras.optimizer_v2.adam", on)]
    assert keras == [("{keras2}.src.optimizers.legacy", False), ("tf_keras", True),
                     ("{keras2}.src", False)]
    assert table.aliases_for("tensorflow.python.ipu.config", set()) == []  # ipu-alias off
    assert table.aliases_for("numpy.linalg", on) == []


def test_every_top_level_ipu_module_is_the_same_both_ways():
    from popdist_launcher.compat import import_table as table
    for name in table.IPU_OPS + table.IPU_OPTIMIZERS:
        kind, modules = table.ipu_attribute(name)
        assert kind == "module"
        entry = table.aliases_for(f"tensorflow.python.ipu.{name}", {"ipu-alias"})[0]
        assert modules[0] == entry.target_of(f"tensorflow.python.ipu.{name}")
    assert table.ipu_attribute("outlined_function")[0] == "function"


def test_switches_from_the_environment():
    from popdist_launcher.compat.import_table import switches_from
    assert switches_from({}) == {"ipu-alias"}
    assert switches_from({"POPDIST_LAUNCHER_IPU_ALIAS": "0", "POPDIST_TF1": "1"}) == {"tf1"}
    assert "horovod-elastic" not in switches_from({"HOROVOD_ELASTIC": "1"})  # not poprun-lite's
    assert "horovod-elastic" in switches_from({"HOROVOD_ELASTIC": "1", "POPRUN_JOB_ID": "j"})
    assert "instance" in switches_from({"POPRUN_STACK_FD": "3:1:10"})


def test_graphcore_names():
    from popdist_launcher.compat.import_table import graphcore_name
    for name in ("tensorflow.python.ipu", "tensorflow.python.ipu.ops.nn_ops", "keras.ipu",
                 "tensorflow.keras.ipu.optimizers", "tensorflow.compiler.plugin.poplar.ops"):
        assert graphcore_name(name), name
    for name in ("tensorflow.python", "popdist_launcher.ipu", "popdist", "keras.optimizers",
                 "tensorflow.python.ipu_like"):
        assert not graphcore_name(name), name


def test_a_switch_turned_on_arms_its_hooks_and_runs_those_of_imported_modules(tmp_path):
    (tmp_path / "later_mod.py").write_text("VALUE = 1\n")
    out = _run("""
        from popdist_launcher.compat import import_table as table
        from popdist_launcher.compat import startup
        import hooked_mod, hook_fns
        table.HOOKS += (table.Hook("hooked_mod", "hook_fns:bump", when=("test-switch",)),
                        table.Hook("later_mod", "hook_fns:bump", when=("test-switch",)))
        startup.switch_on("test-switch")
        startup.switch_on("test-switch")  # once
        import later_mod
        print(hook_fns.CALLS, hooked_mod.VALUE, later_mod.VALUE)
    """, tmp_path)
    assert out == "['hooked_mod', 'later_mod'] 42 2"


# -- the garbage collector around the heavy frameworks' imports (table.FROZEN_AFTER_IMPORT)

_FREEZE_PROBE = """
    import gc, sys
    from popdist_launcher.compat import import_table as table
    from popdist_launcher.compat import startup
    table.FROZEN_AFTER_IMPORT += ("heavy_mod",)
    {setup}
    before = gc.get_freeze_count()
    try:
        import heavy_mod
    except RuntimeError:
        pass
    print(heavy_mod_during(), gc.isenabled(), gc.get_freeze_count() - before)
"""


def _freeze_probe(tmp_path, setup: str, fail: bool = False) -> str:
    (tmp_path / "heavy_mod.py").write_text(textwrap.dedent(f"""
        import builtins, gc
        builtins.heavy_mod_during = (lambda on=gc.isenabled(): on)  # the collector meanwhile
        OBJECTS = [[n] for n in range(1000)]
        if {fail}:
            raise RuntimeError("this import fails")
    """))
    return _run(textwrap.dedent(_FREEZE_PROBE).replace("{setup}", setup), tmp_path)


def test_in_an_instance_the_collector_is_off_during_the_import_and_its_objects_are_frozen(
        tmp_path):
    during, enabled, frozen = _freeze_probe(tmp_path, 'startup.switch_on("instance")').split()
    assert (during, enabled) == ("False", "True")
    assert int(frozen) > 1000


def test_outside_an_instance_nothing_changes(tmp_path):
    assert _freeze_probe(tmp_path, "") == "True True 0"


def test_a_collector_the_program_turned_off_stays_off_and_nothing_is_frozen(tmp_path):
    setup = 'startup.switch_on("instance"); gc.disable()'
    assert _freeze_probe(tmp_path, setup) == "False False 0"


def test_an_import_that_fails_turns_the_collector_back_on_and_freezes_nothing(tmp_path):
    assert _freeze_probe(tmp_path, 'startup.switch_on("instance")', fail=True) == "False True 0"


# -- whether the program is an IPU program (popdist_launcher.compat.ipu_program),
# read from its source

def _graphcore_import(tmp_path, files, main="main.py", package=""):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from popdist_launcher.compat import ipu_program
        main = ({main.replace('/', '.')[:-3]!r}, {package!r}, {str(tmp_path / main)!r}, None)
        print(ipu_program.graphcore_import(main))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_an_ipu_import_in_a_module_the_program_imports_is_found(tmp_path):
    found = _graphcore_import(tmp_path, {
        "main.py": "import numpy\nfrom tensorflow.keras.optimizers import Adam\nimport setup_ipu\n",
        "setup_ipu.py": "def configure():\n    from tensorflow.python import ipu\n    return ipu\n",
    })
    assert found == "('setup_ipu', 'tensorflow.python.ipu')"  # inside a function, too


def test_each_way_of_naming_graphcore_modules_is_found(tmp_path):
    for i, statement in enumerate(("from tensorflow.keras import ipu",
                                   "from keras import ipu",
                                   "import tensorflow.python.ipu.ops.nn_ops as nn_ops",
                                   "from tensorflow.compiler.plugin.poplar.ops import gen_ipu_ops",
                                   "import importlib; "
                                   "importlib.import_module('tensorflow.python.ipu')")):
        folder = tmp_path / str(i)
        folder.mkdir()
        assert _graphcore_import(folder, {"main.py": statement + "\n"}).startswith("('main',"), \
            statement


def test_relative_imports_of_a_package_are_followed(tmp_path):
    found = _graphcore_import(tmp_path, {
        "app/__init__.py": "",
        "app/__main__.py": "from . import train\n",
        "app/train.py": "from .model import build\n",
        "app/model.py": "from tensorflow.python.ipu import keras as ipu_keras\n",
    }, main="app/__main__.py", package="app")
    assert found == "('app.model', 'tensorflow.python.ipu')"


def test_a_program_without_graphcore_names_is_not_an_ipu_program(tmp_path):
    found = _graphcore_import(tmp_path, {
        "main.py": "import helpers\nimport popdist\nfrom popdist_launcher import ipu\n",
        "helpers.py": "import json\nfrom tensorflow.keras.optimizers import Adam\n"
                      "# tensorflow.python.ipu\n",
    })
    assert found == "None"  # popdist and the project's own names are not Graphcore's IPU names


def test_a_real_job_s_instances_freeze_tensorflows_import_and_train(tmp_path):
    """Through poprun-lite: TensorFlow's and Keras 2's import-time objects are frozen in each
    instance, whose collector is on again after; instance 0 turned it off itself first and
    it stays off. Both then train a step and collect their garbage as before."""
    from conftest import poprun
    script = tmp_path / "freeze_probe.py"
    script.write_text(textwrap.dedent("""
        import gc, os
        index = int(os.environ["POPDIST_INSTANCE_INDEX"])
        if index == 0:
            gc.disable()
        import tensorflow as tf
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])  # imports Keras
        model.compile(optimizer="sgd", loss="mse")
        model.fit(tf.ones((4, 2)), tf.ones((4, 1)), epochs=1, verbose=0)
        cycle = []
        cycle.append(cycle)
        del cycle
        print("instance", index, gc.isenabled(), gc.get_freeze_count(), gc.collect() > 0)
    """))
    result = poprun("-np", "2", str(script), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = {line.split()[-4]: line.split()[-3:] for line in result.stdout.splitlines()
             if "instance" in line}
    assert lines["0"] == ["False", "0", "True"], result.stdout
    enabled, frozen, collected = lines["1"]
    assert (enabled, collected) == ("True", "True") and int(frozen) > 100_000, result.stdout
