#include "runtime/shutdown.h"

#include <ATen/ops/ones.h>
#include <torch/csrc/autograd/autograd.h>

#include "runtime/devices.h"

namespace trnsim::neuron {

void quiesce_autograd_threads() {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
        if (!is_created(i)) continue;
        at::Tensor leaf = at::ones({1}, at::TensorOptions().device(c10::DeviceType::PrivateUse1, i));
        leaf.set_requires_grad(true);
        torch::autograd::backward({leaf.sum()});
    }
}

}  // namespace trnsim::neuron
