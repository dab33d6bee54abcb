// The batch engine: read + decode + augment a whole batch into its output tensor on a
// C++ thread pool, with the GIL released. See engine/README.md.
#pragma once

#include <torch/extension.h>

#include <string>

namespace fastload::engine {

// Registers fastload._C.BatchEngine on the extension module.
void bind(pybind11::module_& module);

// Compile-time configuration for `python -m fastload.info`.
pybind11::dict build_info();

}  // namespace fastload::engine
