//===- Build.cpp - Turning generated source into a trainer ----------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "BuildConfig.h"

#include "mtc/Driver/Driver.h"
#include "mtc/runtime/Safetensors.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

using namespace mtc;

namespace {

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Expected<std::string> findHostCompiler() {
  if (const char *cxx = std::getenv("CXX"))
    if (auto path = llvm::sys::findProgramByName(cxx))
      return *path;
  for (const char *name : {"g++", "c++", "clang++"})
    if (auto path = llvm::sys::findProgramByName(name))
      return *path;
  return makeError("no C++ compiler found (g++, c++ or clang++ on PATH, or "
                   "$CXX)");
}

llvm::Expected<std::string> findNvcc() {
  // $MTC_NVCC names another CUDA compiler driver taking nvcc's arguments
  // (test/cudaemu/nvcc-emu builds trainers for the CUDA emulation).
  if (const char *nvcc = std::getenv("MTC_NVCC"); nvcc && *nvcc) {
    if (auto path = llvm::sys::findProgramByName(nvcc);
        path && llvm::sys::fs::can_execute(*path))
      return *path;
    return makeError(llvm::Twine("$MTC_NVCC names '") + nvcc +
                     "', which is not an executable");
  }
  llvm::SmallVector<llvm::StringRef, 2> hints;
  std::string root = MTC_CUDA_ROOT;
  std::string bin = root.empty() ? "" : root + "/bin";
  if (!bin.empty())
    hints.push_back(bin);
  if (auto path = llvm::sys::findProgramByName("nvcc", hints))
    return *path;
  if (auto path = llvm::sys::findProgramByName("nvcc"))
    return *path;
  return makeError("the cuda target is unavailable: nvcc was not found");
}

/// Runs a command, echoing it when verbose; its output goes to our stderr.
llvm::Error run(const std::string &program,
                const std::vector<std::string> &args, bool verbose) {
  std::vector<llvm::StringRef> argv{program};
  for (const std::string &a : args)
    argv.push_back(a);
  if (verbose) {
    for (llvm::StringRef a : argv)
      llvm::errs() << a << " ";
    llvm::errs() << "\n";
  }
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(program, argv, std::nullopt, {}, 0, 0,
                                     &message);
  if (rc != 0) {
    std::string cmd;
    for (llvm::StringRef a : argv)
      cmd += a.str() + " ";
    return makeError("building the trainer failed (exit " +
                     llvm::Twine(rc) + (message.empty() ? "" : ", " + message) +
                     "):\n  " + cmd);
  }
  return llvm::Error::success();
}

llvm::Error writeFile(llvm::StringRef path, llvm::StringRef contents) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return makeError("cannot write '" + path + "': " + ec.message());
  os << contents;
  return llvm::Error::success();
}

} // namespace

llvm::Error mtc::checkToolchain(Target target) {
  if (target == Target::Cpu)
    return findHostCompiler().takeError();
  if (!MTC_HAVE_CUDA_RUNTIME)
    return makeError("the cuda target is unavailable: mtc was built without "
                     "the CUDA runtime (nvcc was not found at configure "
                     "time)");
  if (auto host = findHostCompiler(); !host)
    return host.takeError();
  return findNvcc().takeError();
}

llvm::Error mtc::buildTrainer(const std::string &source,
                              const std::vector<InitTensor> &inits,
                              const BuildOptions &options,
                              const std::string *exportModel) {
  bool cuda = options.target == Target::Cuda;
  std::string out = options.output;
  std::string sourcePath = out + (cuda ? ".cu" : ".cpp");
  std::string initPath = out + ".init.safetensors";
  std::string asmPath = out + ".init.S";
  llvm::SmallString<256> absoluteInit(initPath);
  llvm::sys::fs::make_absolute(absoluteInit);

  llvm::StringRef dir = llvm::sys::path::parent_path(out);
  if (!dir.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(dir))
      return makeError("cannot create '" + dir + "': " + ec.message());
  if (llvm::Error err = writeFile(sourcePath, source))
    return err;
  std::vector<rt::SafetensorsEntry> entries;
  for (const InitTensor &t : inits) {
    rt::SafetensorsEntry e;
    e.name = t.name;
    e.dtype = t.isFloat  ? rt::DType::F32
              : t.isBool ? rt::DType::Bool
                         : rt::DType::I64;
    e.shape = t.shape;
    e.data = t.bytes.data();
    e.bytes = t.bytes.size();
    entries.push_back(e);
  }
  rt::Status status = rt::writeSafetensors(initPath, entries, {{"format", "mtc"}});
  if (!status.ok())
    return makeError("cannot write '" + initPath + "': " + status.message());
  // The initial values are linked into the trainer, so it runs on its own.
  std::string assembly =
      "  .section .rodata\n  .balign 64\n"
      "  .global mtc_init_data\n  .global mtc_init_data_end\n"
      "mtc_init_data:\n  .incbin \"" +
      std::string(absoluteInit.str()) +
      "\"\nmtc_init_data_end:\n  .byte 0\n";
  if (exportModel) {
    std::string exportPath = out + ".export-template.onnx";
    if (llvm::Error err = writeFile(exportPath, *exportModel))
      return err;
    llvm::SmallString<256> absoluteExport(exportPath);
    llvm::sys::fs::make_absolute(absoluteExport);
    assembly += "  .balign 64\n  .global mtc_export_data\n"
                "  .global mtc_export_data_end\nmtc_export_data:\n"
                "  .incbin \"" +
                std::string(absoluteExport.str()) +
                "\"\nmtc_export_data_end:\n  .byte 0\n";
  }
  assembly += "  .section .note.GNU-stack,\"\",@progbits\n";
  if (llvm::Error err = writeFile(asmPath, assembly))
    return err;

  auto host = findHostCompiler();
  if (!host)
    return host.takeError();
  // The runtime's headers and libraries where this mtc was built, or where
  // $MTC_RUNTIME_INCLUDE_DIR / $MTC_RUNTIME_LIB_DIR say (an mtc carried to
  // another machine: scripts/device-bundle.sh).
  auto fromEnv = [](const char *name, const char *builtIn) {
    const char *value = std::getenv(name);
    return std::string(value && *value ? value : builtIn);
  };
  std::string include =
      "-I" + fromEnv("MTC_RUNTIME_INCLUDE_DIR", MTC_RUNTIME_INCLUDE_DIR);
  std::string libDir = fromEnv("MTC_RUNTIME_LIB_DIR", MTC_RUNTIME_LIB_DIR);
  // No contraction of a * b + c into fused multiply-adds: each expression
  // rounds as written, so a fused kernel computes exactly what the ops it
  // replaces did, on any host. Without trapping math the compiler may
  // compute both sides of a select (VecMath.h's functions) and vectorize
  // the loop; no value changes.
  if (!cuda)
    return run(*host,
               {"-O2", "-std=c++17", "-ffp-contract=off", "-fno-trapping-math",
                "-fopenmp", include, sourcePath, asmPath,
                libDir + "/libmtc_runtime_cpu.a", "-lopenblas", "-lm", "-o",
                out},
               options.verbose);

  auto nvcc = findNvcc();
  if (!nvcc)
    return nvcc.takeError();
  std::string asmObject = out + ".init.o";
  if (llvm::Error err =
          run(*host, {"-c", asmPath, "-o", asmObject}, options.verbose))
    return err;
  // Machine code for --arch and its PTX, which the driver compiles for a
  // newer GPU at load (an sm_80 trainer runs on an H100). No contraction
  // into fused multiply-adds here either (nvcc contracts by default): the
  // kernels round as the CPU trainer and the CUDA emulation do.
  std::string arch = options.arch.substr(3); // "sm_80" -> "80"
  return run(*nvcc,
             {"-O2", "-std=c++17", "--fmad=false", "-ccbin", *host,
              "-gencode=arch=compute_" + arch + ",code=[sm_" + arch +
                  ",compute_" + arch + "]",
              include, sourcePath, asmObject, libDir + "/libmtc_runtime_cuda.a",
              "-lcublasLt", "-lcublas", "-o", out},
             options.verbose);
}
