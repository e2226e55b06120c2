#include <iostream>
#include "dispatch/dispatch.h"
using namespace dtensor;
int main() {
  init_ops();
  for (auto& n : Registry::get().names()) { auto& d = Registry::get().find(n); std::cout << n << " [" << d.family << "] " << (d.rules? "rules":"-") << " " << d.schema.text << "\n"; }
  // count strategies of linear on meshes
  for (Shape mesh : {Shape{8}, Shape{8,8}, Shape{2,4,8}}) {
    const OpDef& op = Registry::get().find("linear");
    std::vector<TensorMeta> t{{{8,8192,4096}, DType::kBFloat16},{{14336,4096}, DType::kBFloat16}};
    std::vector<Placements> pl(2, Placements(mesh.size(), Replicate()));
    auto c = OpCall::bind(op, {TensorRef{0}, TensorRef{1}}, {}, t, pl, mesh);
    auto s = expand_strategies(c, op.meta(c), true);
    std::cout << "linear mesh " << mesh.size() << ": " << s.size() << "\n";
  }
}
