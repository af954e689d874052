// axonml_torch._C: the creator torch.distributed calls for backend "axon".
// The package's __init__.py registers it.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/python.h>

#include "axonml/torch/process_group.hpp"
#include "torch/buffers.hpp"
#include "torch/comm_thread.hpp"
#include "torch/interrupts.hpp"
#include "torch/without_gil.hpp"

namespace {

// Waits (a process group joining its threads) with the GIL released when
// this thread holds it: the threads may need the GIL to drop tensors.
void wait_releasing_gil(void (*wait)(void*), void* context) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release released;
    return wait(context);
  }
  wait(context);
}

// Python's main thread, which alone runs signal handlers.
unsigned long python_main_thread = 0;

// The interrupt check (torch/interrupts.hpp): on Python's main thread, in a
// wait that a binding of this module entered with the GIL released
// (InterruptibleWaits), runs the signal handlers that are due and throws
// what one raised, for pybind11 to raise in Python.
void run_signal_handlers() {
  if (PyThread_get_thread_ident() != python_main_thread || !Py_IsInitialized() || PyGILState_Check()) return;
  const PyGILState_STATE state = PyGILState_Ensure();
  if (PyErr_CheckSignals() == 0) return PyGILState_Release(state);
  pybind11::error_already_set raised;  // takes the exception from the interpreter
  PyGILState_Release(state);
  throw raised;
}

// Puts `uncaught` at the end of `raised`'s chain of contexts (what it was
// raised while handling), unless it is in the chain already. Bounded: a
// chain made by hand may loop.
void chain_context(PyObject* raised, PyObject* uncaught) {
  if (!PyExceptionInstance_Check(uncaught)) return;
  PyObject* last = raised;
  for (int depth = 0; depth < 100; ++depth) {
    if (last == uncaught) return;
    PyObject* context = PyException_GetContext(last);  // a new reference, or null
    if (context == nullptr) {
      PyException_SetContext(last, pybind11::handle(uncaught).inc_ref().ptr());  // steals the reference
      return;
    }
    Py_DECREF(context);  // still held by `last`
    last = context;
  }
}

// The exception an excepthook call printed at the program's end, for the
// peers left waiting (ProcessGroupAxon::program_ends): "KeyboardInterrupt"
// and its text. Kept only when CPython itself called the hook with no
// Python frame running, as it does for the exception that ends the
// program, on the main thread and outside an interactive session: not
// code.InteractiveInterpreter's calls, nor a program's own.
struct UncaughtAtExit {
  std::string type;
  std::string text;
};
UncaughtAtExit& uncaught_at_exit() {
  static auto* uncaught = new UncaughtAtExit;  // never destroyed: read at exit
  return *uncaught;
}

bool interactive_session() {
  try {
    const pybind11::module_ sys = pybind11::module_::import("sys");
    return pybind11::hasattr(sys, "ps1") || sys.attr("flags").attr("inspect").cast<bool>() ||
           sys.attr("flags").attr("interactive").cast<bool>();
  } catch (const pybind11::error_already_set&) {
    return true;  // cannot tell: say nothing of it to the peers
  }
}

// str(exception) as UTF-8, undecodable bytes escaped; empty when str() fails.
std::string exception_text(PyObject* exception) {
  PyObject* text = PyObject_Str(exception);
  PyObject* bytes = text != nullptr ? PyUnicode_AsEncodedString(text, "utf-8", "backslashreplace") : nullptr;
  std::string result;
  if (bytes != nullptr) result.assign(PyBytes_AS_STRING(bytes), static_cast<std::size_t>(PyBytes_GET_SIZE(bytes)));
  Py_XDECREF(bytes);
  Py_XDECREF(text);
  if (PyErr_Occurred()) PyErr_Clear();
  return result;
}

void note_if_uncaught_at_exit(PyObject* exception) {
  if (PyThread_get_thread_ident() != python_main_thread || PyEval_GetFrame() != nullptr ||
      !PyExceptionInstance_Check(exception) || interactive_session()) {
    return;
  }
  uncaught_at_exit() = {Py_TYPE(exception)->tp_name, exception_text(exception)};
}

// sys.excepthook, wrapped: runs the signal handlers that are due before
// the exception is printed. Why: a wait PyTorch makes in C++ (DDP's
// backward, Future.wait) holds off Ctrl-C's handler until the wait ends,
// and it ends with an error when a peer exits on its own KeyboardInterrupt;
// CPython then runs the handler in the middle of printing that error, gives
// up, and prints an object dump and "lost sys.stderr" (Ctrl-C to axon-launch
// during DDP training, 4 of 4 runs). What a handler raises is printed with
// the error at the end of its chain of contexts ("During handling of the
// above exception"), which is what happened. A handler's SystemExit
// (sys.exit in a SIGTERM handler, to end on preemption) is raised from the
// hook, and CPython exits quietly with the status it asked for.
pybind11::object excepthook_running_signal_handlers_first(const pybind11::object& previous, pybind11::handle type,
                                                          pybind11::handle value, pybind11::handle traceback) {
  pybind11::object printed_type = pybind11::reinterpret_borrow<pybind11::object>(type);
  pybind11::object printed = pybind11::reinterpret_borrow<pybind11::object>(value);
  pybind11::object printed_traceback = pybind11::reinterpret_borrow<pybind11::object>(traceback);
  // Each handler that raises stops the others: run those too, while due.
  for (int handlers = 0; handlers < 8 && PyErr_CheckSignals() != 0; ++handlers) {
    pybind11::error_already_set raised;  // takes the handler's exception from the interpreter
    if (raised.matches(PyExc_SystemExit)) {
      note_if_uncaught_at_exit(raised.value().ptr());
      throw raised;
    }
    chain_context(raised.value().ptr(), printed.ptr());
    printed_type = raised.type();
    printed = raised.value();
    printed_traceback = raised.trace() ? raised.trace() : pybind11::none();
  }
  note_if_uncaught_at_exit(printed.ptr());
  return previous(printed_type, printed, printed_traceback);
}

// The atexit function: ProcessGroupAxon::program_ends with what the program
// ended on, as the hook above saw it.
void program_ends() {
  const UncaughtAtExit& uncaught = uncaught_at_exit();
  axonml::torch::ProcessGroupAxon::program_ends(uncaught.type, uncaught.text);
}

axonml::torch::ProcessGroupAxon& axon_group(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                            const char* what) {
  auto* axon = dynamic_cast<axonml::torch::ProcessGroupAxon*>(group.get());
  if (axon == nullptr) {
    throw std::invalid_argument(std::string(what) + ": the group's backend is " +
                                (group ? group->getBackendName() : std::string("none")) + ", not axon");
  }
  return *axon;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  axonml::torch::install_wait_runner(wait_releasing_gil);
  python_main_thread =
      pybind11::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  axonml::torch::install_interrupt_check(run_signal_handlers);
  m.doc() = "The axonml shared-memory runtime as torch.distributed backend 'axon'";
  m.attr("__version__") = AXON_TORCH_VERSION;
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::duration<float> timeout, std::vector<int> global_ranks,
         std::optional<std::size_t> shared_mb, int job_size) {
        std::optional<std::size_t> shared_bytes;
        if (shared_mb) shared_bytes = *shared_mb << 20;
        const axonml::torch::InterruptibleWaits interruptible;
        try {
          return axonml::torch::ProcessGroupAxon::create(
              store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout),
              std::move(global_ranks), shared_bytes, job_size);
        } catch (const axonml::torch::Interrupted& e) {  // the peers have its message; Python gets the original
          std::rethrow_exception(e.raised());
        } catch (...) {
          // A set-up failed because a peer left on its own Ctrl-C: the
          // handler due here runs now, not while Python prints the failure.
          axonml::torch::check_interrupts();
          throw;
        }
      },
      pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
      pybind11::arg("global_ranks") = std::vector<int>{}, pybind11::arg("shared_mb") = std::nullopt,
      pybind11::arg("job_size") = 0, pybind11::call_guard<pybind11::gil_scoped_release>(),
      "A process group of backend 'axon'; global_ranks: the members' ranks in the job (empty: the "
      "group is the whole job); shared_mb: MiB of room for place_in_arena (None: AXON_TORCH_SHARED_MB or 0); "
      "job_size: the job's processes, for a subgroup's waits (0: size)");
  // The type Python gets for this backend's ops (a Work whose dynamic type
  // is AxonWork comes out of torch's bindings as this subclass): its wait()
  // alone lets Python's signal handlers end the wait. Waits that libtorch
  // makes from C++ (DDP's reducer, under its own locks) are left alone: an
  // exception thrown through them broke DDP's sequence of collectives (a
  // review).
  pybind11::class_<axonml::torch::AxonWork, c10d::Work, c10::intrusive_ptr<axonml::torch::AxonWork>>(
      m, "Work", "A torch.distributed Work of the axon backend")
      .def(
          "wait",
          [](axonml::torch::AxonWork& work, std::chrono::milliseconds timeout) {
            // Most small ops have completed in their call (run on the
            // caller's thread): releasing and retaking the GIL would cost
            // more than the rest of this wait.
            if (work.completed_without_error()) return true;
            const pybind11::gil_scoped_release without_gil;
            const axonml::torch::InterruptibleWaits interruptible;
            return work.wait(timeout);
          },
          pybind11::arg("timeout") = kNoTimeout,
          "Work.wait(), during which Python's signal handlers run (what one raises ends the wait; the op goes on)");
  m.def(
      "_close_store_together_as_it_goes",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
        axon_group(group, "_close_store_together_as_it_goes").close_store_together_as_it_goes();
      },
      pybind11::arg("group"),
      "For torch.distributed's default group (the backend's creator calls it): as the group goes, its "
      "ranks close the store rank 0 hosts together, so that an init_process_group() right after meets a "
      "new store");
  m.def(
      "place_in_arena",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& group, const at::Tensor& tensor) {
        return axon_group(group, "place_in_arena").place_in_arena(tensor);
      },
      pybind11::arg("group"), pybind11::arg("tensor"), pybind11::call_guard<pybind11::gil_scoped_release>(),
      "ProcessGroupAxon::place_in_arena: moves the tensor's storage into the group's shared memory "
      "(collective); true on every rank when all moved");
  m.def(
      "allreduce_in_arena",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& group, at::Tensor& tensor, bool average) {
        c10d::AllreduceOptions opts;
        if (average) opts.reduceOp = c10d::ReduceOp::AVG;
        return axon_group(group, "allreduce_in_arena").allreduce_in_arena(tensor, opts);
      },
      pybind11::arg("group"), pybind11::arg("tensor"), pybind11::arg("average") = false,
      pybind11::call_guard<pybind11::gil_scoped_release>(),
      "ProcessGroupAxon::allreduce_in_arena: a SUM (with average=True: AVG) all_reduce that first places the "
      "tensor in the group's shared memory when every rank can (else every rank all-reduces privately); "
      "returns the Work");
  m.def(
      "in_arena",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& group, const at::Tensor& tensor) {
        return axon_group(group, "in_arena").in_arena(tensor);
      },
      pybind11::arg("group"), pybind11::arg("tensor"),
      "Whether the tensor's storage lies in the group's shared memory");
  m.def(
      "_has_room_for_placing",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
        return axon_group(group, "_has_room_for_placing").has_room_for_placing();
      },
      pybind11::arg("group"), "Whether the group was made with room for place_in_arena (Options(shared_mb=))");
  m.def(
      "_runtime_reduces",
      [](const at::Tensor& tensor) { return axonml::torch::native_type(tensor.scalar_type()).has_value(); },
      pybind11::arg("tensor"),
      "Whether the runtime has a kernel for the tensor's dtype: only such tensors place_in_arena moves");
  m.def("_finish_pending", &axonml::torch::ProcessGroupAxon::finish_all_pending,
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "Lets every axon group's pending ops finish (cancelling receives still waiting), so that no "
        "thread of theirs holds a Python object when the interpreter ends");
  m.def("_exited_processes", &axonml::torch::ProcessGroupAxon::exited_processes, pybind11::arg("with_left") = true,
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "The job's processes this process's live axon groups of the current world saw exit (with_left: or "
        "leave the world's default group): (global rank, description) pairs");
  m.def(
      "_process_gone_with_the_store", [] { return axonml::torch::ProcessGroupAxon::process_gone_with_the_store(); },
      pybind11::call_guard<pybind11::gil_scoped_release>(),
      "The process to name when the store failed: global rank 0's (which hosts it under env:// and tcp://), "
      "looked for up to a second, else any process of the job that exited; (global rank, description) or None");
  m.def("_note_failure_elsewhere", &axonml::torch::ProcessGroupAxon::note_failure_elsewhere, pybind11::arg("reason"),
        "Records a failure met outside the groups' ops: peers this rank then leaves waiting are told it");
  m.def("_world_begins", &axonml::torch::ProcessGroupAxon::world_begins, pybind11::arg("default_group"),
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "torch.distributed made a new world: groups made before belong to the old one, except default_group");
  m.def(
      "_excepthook_running_signal_handlers_first",
      [](pybind11::object previous) {
        return pybind11::cpp_function(
            [previous](pybind11::handle type, pybind11::handle value, pybind11::handle traceback) {
              return excepthook_running_signal_handlers_first(previous, type, value, traceback);
            },
            pybind11::name("axonml_torch_excepthook"));
      },
      pybind11::arg("previous"),
      "An excepthook that runs the Python signal handlers that are due, then has `previous` print the exception "
      "(or what a handler raised, with the exception at the end of its chain of contexts; a handler's SystemExit is "
      "raised)");
  m.def("_program_ends", &program_ends, pybind11::call_guard<pybind11::gil_scoped_release>(),
        "_finish_pending, then releases the peers already waiting for this rank in a collective, and "
        "lets the default group's end skip waiting for the others (except on rank 0, which hosts the "
        "store), telling them the exception the program ended on (as the excepthook saw it); registered with "
        "atexit");
}
