//===- Export.cpp - The inference model `trainer --export` writes --------===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// The trainer has no protobuf library, so the compiler prepares the exported
// model: the inference graph, serialized once with every trained weight's
// bytes zeroed. Serializing a second time with those bytes set to 0xff shows
// exactly where each weight's data lies (the layout is the same); the
// trainer copies its weights there and writes the file.
//
//===----------------------------------------------------------------------===//

#include "OnnxLoader.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <functional>

using namespace mtc;

static llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Rewrites the training graph into the inference graph, in place.
static void toInference(onnx::GraphProto &graph, bool dropFirstOutput) {
  for (onnx::NodeProto &node : *graph.mutable_node()) {
    if (node.op_type() == "Dropout") {
      std::string input = node.input(0), output = node.output(0);
      node.Clear();
      node.set_op_type("Identity");
      node.set_name(output + "_identity");
      node.add_input(input);
      node.add_output(output);
    } else if (node.op_type() == "BatchNormalization") {
      for (auto &a : *node.mutable_attribute())
        if (a.name() == "training_mode")
          a.set_i(0);
      while (node.output_size() > 1)
        node.mutable_output()->RemoveLast();
    }
  }
  if (dropFirstOutput && graph.output_size() > 1)
    graph.mutable_output()->erase(graph.mutable_output()->begin());

  // Keep the nodes the outputs need.
  llvm::StringSet<> needed;
  for (const auto &o : graph.output())
    needed.insert(o.name());
  std::vector<bool> keep(graph.node_size(), false);
  for (int i = graph.node_size() - 1; i >= 0; --i) {
    const onnx::NodeProto &node = graph.node(i);
    for (const std::string &o : node.output())
      keep[i] = keep[i] || needed.contains(o);
    if (keep[i])
      for (const std::string &in : node.input())
        if (!in.empty())
          needed.insert(in);
  }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i = 0; i < graph.node_size(); ++i)
    if (keep[i])
      *nodes.Add() = graph.node(i);
  graph.mutable_node()->Swap(&nodes);
  auto prune = [&](auto *field) {
    for (int i = field->size() - 1; i >= 0; --i)
      if (!needed.contains(field->Get(i).name()))
        field->DeleteSubrange(i, 1);
  };
  prune(graph.mutable_input());
  prune(graph.mutable_initializer());
  // Shapes inferred for the training graph may name removed values.
  graph.clear_value_info();
}

llvm::Expected<InferenceTemplate>
mtc::buildInferenceTemplate(llvm::StringRef path, const ImportOptions &options,
                            const std::vector<std::string> &weights) {
  // Symbolic dims stay symbolic: the inference model takes any batch.
  ImportOptions unbound = options;
  unbound.dims.clear();
  auto loaded = loadOnnxModel(path, unbound, /*bindAllDims=*/false);
  if (!loaded)
    return loaded.takeError();
  onnx::ModelProto &model = **loaded;
  toInference(*model.mutable_graph(), options.appendLoss.empty());
  model.set_producer_name("mtc");

  llvm::StringSet<> wanted;
  for (const std::string &w : weights)
    wanted.insert(w);
  std::vector<onnx::TensorProto *> filled;
  for (onnx::TensorProto &t : *model.mutable_graph()->mutable_initializer()) {
    if (!wanted.contains(t.name()) ||
        t.data_type() != onnx::TensorProto::FLOAT)
      continue;
    int64_t count = 1;
    for (int64_t d : t.dims())
      count *= d;
    t.clear_float_data();
    t.set_raw_data(std::string(count * sizeof(float), '\0'));
    filled.push_back(&t);
  }
  InferenceTemplate result;
  if (!model.SerializeToString(&result.bytes))
    return makeError("cannot serialize the inference model");
  for (onnx::TensorProto *t : filled)
    t->set_raw_data(std::string(t->raw_data().size(), '\xff'));
  std::string marked;
  if (!model.SerializeToString(&marked) ||
      marked.size() != result.bytes.size())
    return makeError("cannot locate the weights in the inference model");
  // The differing bytes are the weights' data, in initializer order.
  size_t pos = 0;
  for (onnx::TensorProto *t : filled) {
    while (pos < marked.size() && marked[pos] == result.bytes[pos])
      ++pos;
    size_t size = t->raw_data().size();
    if (size == 0)
      continue;
    if (pos + size > marked.size())
      return makeError("cannot locate weight '" + t->name() +
                       "' in the inference model");
    result.weights.push_back({t->name(), pos, size});
    pos += size;
  }
  return result;
}
