# -*- Python -*-
# Part of the mtc project.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "mtc"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.mtc_obj_root, "test")
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py",
                   "unit"]

# Tests run with a clean, deterministic environment.
config.environment["FILECHECK_OPTS"] = "--enable-var-scope"
config.environment["OMP_NUM_THREADS"] = "2"
for var in ["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "HOME", "TMPDIR"]:
    if var in os.environ:
        config.environment[var] = os.environ[var]

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.mtc_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

config.substitutions.append(("%python", config.python_executable))
config.substitutions.append(("%mtc", os.path.join(config.mtc_tools_dir, "mtc")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root,
                                                      "Inputs")))
config.substitutions.append(("%runtime_lib_dir",
                             os.path.join(config.mtc_obj_root, "lib")))

if config.mtc_enable_cuda:
    config.available_features.add("cuda-toolkit")
# The CUDA emulation (test/cudaemu) is built where the CUDA headers are.
if os.path.exists(os.path.join(config.mtc_obj_root, "lib",
                               "libmtc_runtime_cudaemu.a")):
    config.available_features.add("cuda-emulation")



