//===- OnnxLoader.cpp - Reading and checking ONNX files -------------------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//

#include "OnnxLoader.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>
#include <limits>
#include <set>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

using namespace mtc;

static llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Reads the external data of `tensor` into raw_data, refusing any location
/// that resolves outside `modelDir`.
static llvm::Error inlineExternalData(onnx::TensorProto &tensor,
                                      llvm::StringRef modelDir) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto &entry : tensor.external_data()) {
    if (entry.key() == "location")
      location = entry.value();
    else if (entry.key() == "offset")
      offset = std::strtoll(entry.value().c_str(), nullptr, 10);
    else if (entry.key() == "length")
      length = std::strtoll(entry.value().c_str(), nullptr, 10);
  }
  if (location.empty())
    return makeError("initializer '" + tensor.name() +
                     "' has external data without a location");
  if (llvm::sys::path::is_absolute(location))
    return makeError("initializer '" + tensor.name() +
                     "': external data path '" + location +
                     "' is absolute; it must stay inside the model's folder");
  llvm::SmallString<256> joined(modelDir);
  llvm::sys::path::append(joined, location);
  llvm::SmallString<256> real, realDir;
  if (llvm::sys::fs::real_path(joined, real) ||
      llvm::sys::fs::real_path(modelDir, realDir))
    return makeError("initializer '" + tensor.name() +
                     "': cannot open external data file '" + location + "'");
  llvm::StringRef realRef(real);
  if (!realRef.starts_with(realDir) ||
      (realRef.size() > realDir.size() &&
       !llvm::sys::path::is_separator(realRef[realDir.size()])))
    return makeError("initializer '" + tensor.name() +
                     "': external data path '" + location +
                     "' leaves the model's folder");
  auto buffer = llvm::MemoryBuffer::getFile(real, /*IsText=*/false);
  if (!buffer)
    return makeError("initializer '" + tensor.name() +
                     "': cannot read external data file '" + location + "'");
  int64_t size = (*buffer)->getBufferSize();
  if (length < 0)
    length = size - offset;
  if (offset < 0 || offset > size || length > size - offset)
    return makeError("initializer '" + tensor.name() + "': external data [" +
                     llvm::Twine(offset) + ", +" + llvm::Twine(length) +
                     ") lies outside '" + location + "' (" +
                     llvm::Twine(size) + " bytes)");
  tensor.set_raw_data((*buffer)->getBufferStart() + offset, length);
  tensor.clear_external_data();
  tensor.set_data_location(onnx::TensorProto::DEFAULT);
  return llvm::Error::success();
}

/// The bytes of one element of an ONNX tensor type; 0 for the types whose
/// data is not fixed-size (strings) or that mtc never reads.
static int64_t elementBytes(int32_t type) {
  switch (type) {
  case onnx::TensorProto::BOOL:
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
    return 1;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
    return 2;
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32:
    return 4;
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64:
    return 8;
  default:
    return 0;
  }
}

/// The elements `tensor`'s typed data field holds (raw_data aside).
static int64_t typedElements(const onnx::TensorProto &tensor) {
  switch (tensor.data_type()) {
  case onnx::TensorProto::FLOAT:
    return tensor.float_data_size();
  case onnx::TensorProto::DOUBLE:
    return tensor.double_data_size();
  case onnx::TensorProto::INT64:
    return tensor.int64_data_size();
  case onnx::TensorProto::UINT32:
  case onnx::TensorProto::UINT64:
    return tensor.uint64_data_size();
  default: // 8- and 16-bit types and int32 live in int32_data
    return tensor.int32_data_size();
  }
}

/// Refuses a tensor (an initializer, or a Constant node's value) whose data
/// does not hold the elements its dims make: read as they are, such data
/// would be read past its end (ONNX's own shape inference does).
static llvm::Error checkTensorData(const onnx::TensorProto &tensor,
                                   const llvm::Twine &what) {
  int64_t count = 1;
  std::string dims;
  for (int64_t d : tensor.dims()) {
    dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    if (d < 0)
      return makeError(what + " has a negative dimension [" + dims + "]");
    count = d != 0 && count > std::numeric_limits<int64_t>::max() / d
                ? -1
                : count * d;
    if (count < 0)
      return makeError(what + " has too many elements [" + dims + "]");
  }
  const int64_t bytes = elementBytes(tensor.data_type());
  if (bytes == 0)
    return llvm::Error::success();
  const int64_t held =
      tensor.has_raw_data()
          ? static_cast<int64_t>(tensor.raw_data().size()) / bytes
          : typedElements(tensor);
  const bool exact =
      !tensor.has_raw_data() ||
      static_cast<int64_t>(tensor.raw_data().size()) % bytes == 0;
  if (held == count && exact)
    return llvm::Error::success();
  return makeError(what + ": its dims [" + dims + "] make " +
                   llvm::Twine(count) + " elements, but its data holds " +
                   (tensor.has_raw_data()
                        ? llvm::Twine(tensor.raw_data().size()) + " bytes (" +
                              llvm::Twine(bytes) + " an element)"
                        : llvm::Twine(held) + " elements"));
}

/// checkTensorData over the initializers and the Constant nodes' values.
static llvm::Error checkGraphData(const onnx::GraphProto &graph) {
  for (const auto &tensor : graph.initializer())
    if (llvm::Error err =
            checkTensorData(tensor, "initializer '" + tensor.name() + "'"))
      return err;
  for (const auto &node : graph.node())
    for (const auto &attr : node.attribute())
      if (attr.has_t())
        if (llvm::Error err = checkTensorData(
                attr.t(), "attribute '" + attr.name() + "' of node '" +
                              node.name() + "' (" + node.op_type() + ")"))
          return err;
  return llvm::Error::success();
}

/// ONNX's shape inference, run in a child process: the library reads some
/// malformed nodes out of bounds (an attribute list shorter than the op
/// needs, say) and would take mtc down with it. The child sends back the
/// model as inference left it, less the initializers' data, which stays
/// here. Where no child can be made it runs here.
static llvm::Error inferShapes(onnx::ModelProto &model, llvm::StringRef path) {
  onnx::ShapeInferenceOptions inferOptions{/*check_type=*/true,
                                           /*error_mode=*/0,
                                           /*enable_data_propagation=*/true};
  auto infer = [&](onnx::ModelProto &m) {
    onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(),
                                       inferOptions);
  };
  auto failedWith = [&](const std::string &what) {
    return makeError("ONNX shape inference failed on '" + path + "': " + what);
  };
  int fds[2];
  pid_t child = -1;
  if (pipe(fds) == 0) {
    std::fflush(nullptr);
    child = fork();
    if (child < 0) {
      close(fds[0]);
      close(fds[1]);
    }
  }
  if (child < 0) {
    try {
      infer(model);
    } catch (const std::exception &e) {
      return failedWith(e.what());
    }
    return llvm::Error::success();
  }
  if (child == 0) {
    close(fds[0]);
    std::string reply;
    try {
      infer(model);
      model.mutable_graph()->clear_initializer();
      reply = "M" + model.SerializeAsString();
    } catch (const std::exception &e) {
      reply = std::string("E") + e.what();
    }
    for (size_t sent = 0; sent < reply.size();) {
      ssize_t n = write(fds[1], reply.data() + sent, reply.size() - sent);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        _exit(1);
      sent += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string reply;
  char chunk[1 << 16];
  for (;;) {
    ssize_t n = read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    reply.append(chunk, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    return failedWith(std::string("the library crashed (") +
                      strsignal(WTERMSIG(status)) +
                      ") on a malformed node: an attribute, input or shape "
                      "that does not fit its op");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || reply.empty())
    return failedWith("its process ended without an answer");
  if (reply[0] == 'E')
    return failedWith(reply.substr(1));
  onnx::ModelProto inferred;
  if (reply[0] != 'M' ||
      !inferred.ParseFromArray(reply.data() + 1,
                               static_cast<int>(reply.size() - 1)))
    return failedWith("its answer could not be read");
  inferred.mutable_graph()->mutable_initializer()->Swap(
      model.mutable_graph()->mutable_initializer());
  model.Swap(&inferred);
  return llvm::Error::success();
}

/// Replaces symbolic dims of graph inputs by the bound values. A binding
/// of a name no input has is refused (a typo would otherwise go unseen).
static llvm::Error bindDims(onnx::GraphProto &graph,
                            const ImportOptions &options, bool bindAll) {
  std::set<std::string> symbolic;
  for (const auto &input : graph.input())
    if (input.type().has_tensor_type() &&
        input.type().tensor_type().has_shape())
      for (const auto &dim : input.type().tensor_type().shape().dim())
        if (!dim.has_dim_value() && !dim.dim_param().empty())
          symbolic.insert(dim.dim_param());
  for (const auto &binding : options.dims) {
    const std::string name = binding.getKey().str();
    if (symbolic.count(name))
      continue;
    std::string known;
    for (const std::string &s : symbolic)
      known += (known.empty() ? "" : ", ") + ("'" + s + "'");
    return makeError("--dim " + name +
                     ": no input of the model has a symbolic dimension '" +
                     name + "' (" +
                     (known.empty() ? std::string("its inputs' shapes are "
                                                  "all static: export it "
                                                  "with a dynamic axis, or "
                                                  "drop --dim")
                                    : "its symbolic dimensions: " + known) +
                     ")");
  }
  for (auto &input : *graph.mutable_input()) {
    if (!input.type().has_tensor_type() ||
        !input.type().tensor_type().has_shape())
      continue;
    auto *shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
    for (int i = 0; i < shape->dim_size(); ++i) {
      auto *dim = shape->mutable_dim(i);
      if (dim->has_dim_value())
        continue;
      std::string name = dim->dim_param();
      auto it = options.dims.find(name);
      if (!bindAll && it == options.dims.end())
        continue;
      if (name.empty() || it == options.dims.end())
        return makeError(
            "dimension " + llvm::Twine(i) + " of input '" + input.name() +
            "' is symbolic ('" + (name.empty() ? "?" : name) +
            "') and not bound; pass --dim " + (name.empty() ? "NAME" : name) +
            "=VALUE");
      dim->set_dim_value(it->second);
    }
  }
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<onnx::ModelProto>>
mtc::loadOnnxModel(llvm::StringRef path, const ImportOptions &options,
                   bool bindAllDims) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false);
  if (!buffer)
    return makeError("cannot read '" + path + "': " +
                     buffer.getError().message());
  auto model = std::make_unique<onnx::ModelProto>();
  llvm::StringRef bytes = (*buffer)->getBuffer();
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
    return makeError("'" + path + "' is " + llvm::Twine(bytes.size() >> 20) +
                     " MiB: a protobuf file over 2 GiB cannot be read (ONNX "
                     "keeps such models' weights as external data: save it "
                     "with save_as_external_data=True)");
  if (!model->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return makeError("'" + path +
                     "' is not a valid ONNX model (malformed or truncated "
                     "protobuf)");
  if (!model->has_graph())
    return makeError("'" + path + "' holds no graph");

  llvm::SmallString<256> dir(path);
  llvm::sys::path::remove_filename(dir);
  if (dir.empty())
    dir = ".";
  for (auto &tensor : *model->mutable_graph()->mutable_initializer())
    if (tensor.data_location() == onnx::TensorProto::EXTERNAL)
      if (llvm::Error err = inlineExternalData(tensor, dir))
        return std::move(err);
  if (llvm::Error err =
          bindDims(*model->mutable_graph(), options, bindAllDims))
    return std::move(err);

  try {
    onnx::checker::check_model(*model);
  } catch (const std::exception &e) {
    return makeError("'" + path + "' fails the ONNX checker: " + e.what());
  }
  if (llvm::Error err = checkGraphData(model->graph()))
    return makeError("'" + path + "': " + llvm::toString(std::move(err)));
  if (llvm::Error err = inferShapes(*model, path))
    return std::move(err);
  return std::move(model);
}
