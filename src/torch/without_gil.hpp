// Waiting for a communication thread without holding Python's GIL.
//
// A communication thread drops an op's tensors when the op ends, and
// dropping the last reference to a tensor that Python has seen takes the
// GIL. A thread that holds the GIL while it waits for a communication thread
// would wait forever: Python destroys a process group (destroy_process_group,
// or the last reference going away) with the GIL held, and the destructor
// joins the group's threads. libaxonml_torch does not link Python, so the
// Python module installs, when imported, a runner that releases the GIL
// around a wait when the calling thread holds it; a C++ program without
// Python has none installed and waits as it is.
//
// Thread safety: install_wait_runner() once, before any group exists;
// wait_without_gil() from any thread.
#pragma once

#include <type_traits>

namespace axonml::torch {

// Calls wait(context), with whatever the runner must hold off released.
using WaitRunner = void (*)(void (*wait)(void*), void* context);

void install_wait_runner(WaitRunner runner);

// Runs `wait` through the installed runner, or directly when there is none.
template <class Wait> void wait_without_gil(Wait&& wait);

namespace detail {
void run_wait(void (*wait)(void*), void* context);
}

template <class Wait> void wait_without_gil(Wait&& wait) {
  using Fn = std::remove_reference_t<Wait>;
  detail::run_wait([](void* context) { (*static_cast<Fn*>(context))(); }, &wait);
}

}  // namespace axonml::torch
