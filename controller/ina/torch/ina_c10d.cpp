// The ina backend's C++ half: what torch 2.14 lets no backend written in Python do.
//
// torch wraps every Work a Python backend returns in a holder (PyWorkHolder) that
// forwards only wait() and getFuture(): its isCompleted() stays false and its
// sourceRank() is refused, so work.is_completed() never turns True and recv(src=None)
// cannot say who sent. BackendCore forwards every method torch calls of a backend to
// the Python subclass's method of that name, as torch's own PyBackend does, but returns
// the Python method's Work itself when it is a C++ one (FutureWork below, or a gloo
// Work), wrapped only when it is a Python one. (PyBackend finds a Python override only
// for an object bound as torch's Backend itself, not as a class derived from it: so
// every method is forwarded here, not inherited.)
//
// FutureWork is a Work done when a future is: isCompleted() once it is, wait()
// raising its error. set_error() completes a future with a Python exception as its
// error (torch's Future.set_exception stores the exception as a value instead, which
// C++ cannot tell from a result).
//
// Built by ina.torch.native with torch's own headers and compiler flags.

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/distributed/c10d/py/PyProcessGroup.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

namespace py = pybind11;

namespace {

using c10d::Backend;
using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;

class FutureWork : public Work {
 public:
  explicit FutureWork(c10::intrusive_ptr<c10::ivalue::Future> future)
      : future_(std::move(future)) {}

  bool isCompleted() override {
    return future_->completed();
  }

  bool isSuccess() const override {
    return future_->completed() && !future_->hasError();
  }

  std::exception_ptr exception() const override {
    return future_->completed() && future_->hasError() ? future_->exception_ptr()
                                                       : nullptr;
  }

  // torch's binding has released the GIL: the call thread completes the future.
  bool wait(std::chrono::milliseconds /* timeout */) override {
    future_->waitAndThrow();
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The Work a Python method returned: itself if it is a C++ object (FutureWork, a
// gloo Work: it lives by its reference count), else torch's holder, which keeps a
// Python subclass alive.
WorkPtr unheld(py::object work) {
  if (work.is_none()) {
    return WorkPtr();
  }
  if (py::type::handle_of(work).is(py::type::of<FutureWork>()) ||
      py::type::handle_of(work).is(py::type::of<Work>())) {
    return work.cast<WorkPtr>();
  }
  return c10::make_intrusive<c10d::PyProcessGroup::PyWorkHolder>(std::move(work));
}

class BackendCore;

// The Python subclass's method ``name`` (none: an empty function).
py::function method_of(const BackendCore* self, const char* name) {
  return py::get_override(self, name);
}

// Call the Python subclass's method ``py_name``, or the base's if it has none.
#define INA_FORWARD(py_name, base_call, ...)                                    \
  do {                                                                          \
    py::gil_scoped_acquire gil;                                                 \
    py::function method = method_of(this, py_name);                             \
    if (method) {                                                               \
      return unheld(method(__VA_ARGS__));                                       \
    }                                                                           \
    return base_call;                                                           \
  } while (false)

class BackendCore : public Backend {
 public:
  using Backend::Backend;

  const std::string getBackendName() const override {
    py::gil_scoped_acquire gil;
    py::function method = method_of(this, "getBackendName");
    return method ? method().cast<std::string>() : std::string("python");
  }

  uint64_t getSequenceNumberForGroup() override {
    py::gil_scoped_acquire gil;
    py::function method = method_of(this, "_get_sequence_number_for_group");
    return method ? method().cast<uint64_t>() : Backend::getSequenceNumberForGroup();
  }

  bool supportsSplitting() const override {
    return property("supports_splitting", Backend::supportsSplitting());
  }

  bool supportsCoalescing() const override {
    return property("supports_coalescing", Backend::supportsCoalescing());
  }

  bool supportsTimeEstimation() const override {
    return property("supports_time_estimate", Backend::supportsTimeEstimation());
  }

  bool supportsShrinking() const override {
    return property("supports_shrinking", Backend::supportsShrinking());
  }

  bool supportsReconfigure() const override {
    return property("supports_reconfigure", Backend::supportsReconfigure());
  }

  bool supportsWindow() const override {
    return property("supports_window", Backend::supportsWindow());
  }

  void shutdown() override {
    py::gil_scoped_acquire gil;
    if (py::function method = method_of(this, "shutdown")) {
      method();
    }
  }

  void abort() override {
    py::gil_scoped_acquire gil;
    if (py::function method = method_of(this, "abort")) {
      method();
    }
  }

  WorkPtr broadcast(std::vector<at::Tensor>& tensors,
                    const c10d::BroadcastOptions& opts) override {
    INA_FORWARD("broadcast", Backend::broadcast(tensors, opts), tensors, opts);
  }

  WorkPtr allreduce(std::vector<at::Tensor>& tensors,
                    const c10d::AllreduceOptions& opts) override {
    INA_FORWARD("allreduce", Backend::allreduce(tensors, opts), tensors, opts);
  }

  WorkPtr allreduce_sparse(std::vector<at::Tensor>& tensors,
                           const c10d::AllreduceOptions& opts) override {
    INA_FORWARD("allreduce_sparse", Backend::allreduce_sparse(tensors, opts), tensors,
                opts);
  }

  WorkPtr allreduce_coalesced(std::vector<at::Tensor>& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override {
    INA_FORWARD("allreduce_coalesced", Backend::allreduce_coalesced(tensors, opts),
                tensors, opts);
  }

  WorkPtr reduce(std::vector<at::Tensor>& tensors,
                 const c10d::ReduceOptions& opts) override {
    INA_FORWARD("reduce", Backend::reduce(tensors, opts), tensors, opts);
  }

  WorkPtr allgather(std::vector<std::vector<at::Tensor>>& outputs,
                    std::vector<at::Tensor>& inputs,
                    const c10d::AllgatherOptions& opts) override {
    INA_FORWARD("allgather", Backend::allgather(outputs, inputs, opts), outputs, inputs,
                opts);
  }

  WorkPtr all_gather_single(at::Tensor& output, at::Tensor& input,
                            const c10d::AllgatherOptions& opts) override {
    INA_FORWARD("all_gather_single", Backend::all_gather_single(output, input, opts),
                output, input, opts);
  }

  WorkPtr allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                              std::vector<at::Tensor>& inputs,
                              const c10d::AllgatherOptions& opts) override {
    INA_FORWARD("allgather_coalesced", Backend::allgather_coalesced(outputs, inputs, opts),
                outputs, inputs, opts);
  }

  WorkPtr all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                      std::vector<at::Tensor>& inputs,
                                      const c10d::AllgatherOptions& opts) override {
    INA_FORWARD("all_gather_single_coalesced",
                Backend::all_gather_single_coalesced(outputs, inputs, opts), outputs,
                inputs, opts);
  }

  WorkPtr gather(std::vector<std::vector<at::Tensor>>& outputs,
                 std::vector<at::Tensor>& inputs,
                 const c10d::GatherOptions& opts) override {
    INA_FORWARD("gather", Backend::gather(outputs, inputs, opts), outputs, inputs, opts);
  }

  WorkPtr scatter(std::vector<at::Tensor>& outputs,
                  std::vector<std::vector<at::Tensor>>& inputs,
                  const c10d::ScatterOptions& opts) override {
    INA_FORWARD("scatter", Backend::scatter(outputs, inputs, opts), outputs, inputs, opts);
  }

  WorkPtr reduce_scatter(std::vector<at::Tensor>& outputs,
                         std::vector<std::vector<at::Tensor>>& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    INA_FORWARD("reduce_scatter", Backend::reduce_scatter(outputs, inputs, opts), outputs,
                inputs, opts);
  }

  WorkPtr reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                const c10d::ReduceScatterOptions& opts) override {
    INA_FORWARD("reduce_scatter_single",
                Backend::reduce_scatter_single(output, input, opts), output, input, opts);
  }

  WorkPtr reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    INA_FORWARD("reduce_scatter_single_coalesced",
                Backend::reduce_scatter_single_coalesced(outputs, inputs, opts), outputs,
                inputs, opts);
  }

  WorkPtr all_to_all_single(at::Tensor& output, at::Tensor& input,
                            std::vector<int64_t>& output_splits,
                            std::vector<int64_t>& input_splits,
                            const c10d::AllToAllOptions& opts) override {
    INA_FORWARD("all_to_all_single",
                Backend::all_to_all_single(output, input, output_splits, input_splits, opts),
                output, input, output_splits, input_splits, opts);
  }

  WorkPtr alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                   const c10d::AllToAllOptions& opts) override {
    INA_FORWARD("alltoall", Backend::alltoall(outputs, inputs, opts), outputs, inputs, opts);
  }

  WorkPtr send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    INA_FORWARD("send", Backend::send(tensors, dst, tag), tensors, dst, tag);
  }

  WorkPtr recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    INA_FORWARD("recv", Backend::recv(tensors, src, tag), tensors, src, tag);
  }

  WorkPtr recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    INA_FORWARD("recv_anysource", Backend::recvAnysource(tensors, tag), tensors, tag);
  }

  WorkPtr barrier(const c10d::BarrierOptions& opts) override {
    INA_FORWARD("barrier", Backend::barrier(opts), opts);
  }

 private:
  // A property of the Python subclass (torch reads these as properties), or the
  // base's value if it has none.
  bool property(const char* name, bool base) const {
    py::gil_scoped_acquire gil;
    py::handle self = py::detail::get_object_handle(
        this, py::detail::get_type_info(typeid(BackendCore)));
    if (!self) {
      return base;
    }
    // torch's own property calls back here: only the subclass's counts.
    py::object mine = py::getattr(py::type::handle_of(self), name, py::none());
    py::object torchs = py::getattr(py::type::of<Backend>(), name, py::none());
    if (mine.is_none() || mine.is(torchs)) {
      return base;
    }
    return py::getattr(self, name).cast<bool>();
  }
};

// A Python exception held as a future's error: raised again, the same object, each
// time the future is waited for (a translator registered below), and read by C++ as
// its message.
class PythonRaised : public std::exception {
 public:
  // With the GIL held.
  explicit PythonRaised(py::object error)
      : error_(new py::object(std::move(error)),
               [](py::object* held) {
                 py::gil_scoped_acquire gil;
                 delete held;
               }),
        what_(py::str(*error_).cast<std::string>()) {}

  const char* what() const noexcept override {
    return what_.c_str();
  }

  void raise() const {
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error_->ptr())), error_->ptr());
  }

 private:
  // Shared by the copies std::exception_ptr may make; freed with the GIL held.
  std::shared_ptr<py::object> error_;
  std::string what_;
};

// Complete ``future`` with ``error`` as its error: its wait() raises it, in Python
// and in C++ (FutureWork, DDP's hooks), as torch's own backends' futures do.
void set_error(const std::shared_ptr<torch::jit::PythonFutureWrapper>& future,
               py::object error) {
  future->fut->setError(std::make_exception_ptr(PythonRaised(std::move(error))));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::module_::import("torch.distributed");
  py::class_<BackendCore, Backend, c10::intrusive_ptr<BackendCore>>(m, "BackendCore")
      .def(py::init<int, int>(), py::arg("rank"), py::arg("size"));
  py::class_<FutureWork, Work, c10::intrusive_ptr<FutureWork>>(m, "FutureWork")
      .def(py::init([](const std::shared_ptr<torch::jit::PythonFutureWrapper>& future) {
             return c10::make_intrusive<FutureWork>(future->fut);
           }),
           py::arg("future"));
  m.def("set_error", &set_error, py::arg("future"), py::arg("error"));
  py::register_exception_translator([](std::exception_ptr raised) {
    try {
      if (raised) {
        std::rethrow_exception(raised);
      }
    } catch (const PythonRaised& error) {
      error.raise();
    }
  });
}
