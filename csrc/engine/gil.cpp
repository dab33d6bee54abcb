// install_exit_guard (gil.h): a parked thread instead of std::terminate at the
// interpreter's exit.
#include "engine/gil.h"

#include <pythread.h>
#include <unistd.h>

#include <atomic>
#include <exception>
#include <mutex>

namespace fastload::engine {
namespace {

std::terminate_handler previous_handler = nullptr;
std::atomic<unsigned long> main_thread{0};

[[noreturn]] void terminate_or_park() {
  // No exception in flight: a forced unwind (pthread_exit) met a noexcept frame. Python's
  // finalisation ends threads that ask for the GIL back so; the main thread runs it.
  if (!std::current_exception() && interpreter_finalizing() && PyThread_get_thread_ident() != main_thread.load()) {
    for (;;) ::pause();
  }
  if (previous_handler != nullptr) previous_handler();
  std::abort();
}

}  // namespace

void install_exit_guard() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The thread that will finalise the interpreter: threading's main thread.
    PyObject* threading = PyImport_ImportModule("threading");
    PyObject* main = threading != nullptr ? PyObject_CallMethod(threading, "main_thread", nullptr) : nullptr;
    PyObject* ident = main != nullptr ? PyObject_GetAttrString(main, "ident") : nullptr;
    if (ident != nullptr) main_thread.store(PyLong_AsUnsignedLong(ident));
    Py_XDECREF(ident);
    Py_XDECREF(main);
    Py_XDECREF(threading);
    if (PyErr_Occurred()) PyErr_Clear();  // no guard is better than a failed import
    if (main_thread.load() != 0) previous_handler = std::set_terminate(terminate_or_park);
  });
}

}  // namespace fastload::engine
