#include "bench/baseline.h"

#include <stdexcept>

namespace normgen::bench {

int64_t CaseTensors::at(const std::string &axis) const {
    auto it = extent.find(axis);
    if (it == extent.end()) throw std::logic_error("layer '" + layer + "' has no axis '" + axis + "'");
    return it->second;
}

uint8_t *CaseTensors::ptr(const std::string &tensor) const {
    auto it = data.find(tensor);
    if (it == data.end()) throw std::logic_error("layer '" + layer + "' has no tensor '" + tensor + "'");
    return it->second;
}

const std::vector<std::string> &baseline_names() {
    static const std::vector<std::string> names{"scalar", "onednn", "torch"};
    return names;
}

std::unique_ptr<Baseline> make_baseline(const std::string &impl, const CaseTensors &t, std::string *why_not) {
    if (impl == "scalar") return make_scalar_baseline(t, why_not);
    if (impl == "onednn") return make_onednn_baseline(t, why_not);
    if (impl == "torch") return make_torch_baseline(t, why_not);
    *why_not = "unknown implementation '" + impl + "'";
    return nullptr;
}

}  // namespace normgen::bench
