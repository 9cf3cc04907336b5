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

#include <exception>
#include <limits>
#include <set>

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
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !model->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
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
  try {
    onnx::ShapeInferenceOptions inferOptions{/*check_type=*/true,
                                             /*error_mode=*/0,
                                             /*enable_data_propagation=*/true};
    onnx::shape_inference::InferShapes(*model, onnx::OpSchemaRegistry::Instance(),
                                       inferOptions);
  } catch (const std::exception &e) {
    return makeError("ONNX shape inference failed on '" + path +
                     "': " + e.what());
  }
  return std::move(model);
}
