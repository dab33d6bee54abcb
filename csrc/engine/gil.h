// The GIL released around a blocking engine call, taken back in a way that lets Python
// end the thread while the interpreter finalises.
//
// Python (3.13 and older) ends a thread that asks for the GIL after finalisation began
// with pthread_exit. On glibc that is a forced unwind (abi::__forced_unwind), which must
// pass every C++ frame up to the thread's start: a noexcept frame on its way calls
// std::terminate (SIGABRT, "terminate called without an active exception").
// pybind11::gil_scoped_release takes the GIL back in its destructor, noexcept like every
// destructor by default: a daemon thread waiting in the engine at exit aborted the process.
// This guard's destructor is noexcept(false), so the unwind passes through it and on
// through pybind11's dispatcher (which rethrows abi::__forced_unwind) to the thread's start.
#pragma once

#include <Python.h>

#include <chrono>
#include <exception>
#include <thread>

namespace fastload::engine {

// The interpreter is finalising: a thread asking for the GIL now is ended (pthread_exit).
// Reads an atomic of the runtime: safe without the GIL.
inline bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

class GilRelease {
 public:
  // PRECONDITION: the calling thread holds the GIL.
  GilRelease() : state_(PyEval_SaveThread()) {}
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

  ~GilRelease() noexcept(false) {
    if (std::uncaught_exceptions() > 0 && interpreter_finalizing()) {
      // Already unwinding an exception: a forced unwind could not leave this destructor.
      // The interpreter is going away and this thread must not run Python again; the
      // process's exit ends it.
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    PyEval_RestoreThread(state_);  // may end the thread (pthread_exit) during finalisation
  }

 private:
  PyThreadState* state_;
};

// Makes a forced unwind that cannot pass a noexcept frame during the interpreter's
// finalisation park its thread instead of aborting the process. GilRelease covers the
// engine's own calls; other C++ that releases the GIL on a Python thread (torch's tensor
// deallocation, for one) still takes it back in noexcept frames, so a daemon thread that
// frees a batch at exit would abort the process in torch. Python 3.14 hangs such threads
// itself (PyThread_hang_thread); this does the same on older versions: a std::terminate
// handler that parks a thread other than the main one, with no exception in flight, while
// the interpreter finalises (the process's exit ends it), and defers to the previous
// handler in every other case. Installed once, when fastload._C is imported.
void install_exit_guard();

}  // namespace fastload::engine
