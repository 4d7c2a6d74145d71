/* A memcpy that survives SIGBUS: copies to and from a mapping of a file that another
 * process may shrink (a client's shared-memory region).
 *
 * Touching a mapped page past the end of its file raises SIGBUS, which kills the
 * process. Here the copy runs with a per-thread jump target set; the SIGBUS handler
 * jumps back to it, and copy() returns False instead. A SIGBUS raised anywhere else is
 * not ours: the handler puts the previous disposition back and returns, so the fault
 * happens again and is handled as it would have been without this module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

/* volatile, and fenced below: the compiler must not drop or move the stores around the
 * memcpy, which it knows does not read them. */
/* initial-exec: read in the handler without __tls_get_addr, which may allocate. */
static __thread __attribute__((tls_model("initial-exec"))) sigjmp_buf *volatile guard = NULL;
static struct sigaction previous;

static void on_sigbus(int sig, siginfo_t *info, void *context) {
    sigjmp_buf *target = guard;
    (void)context;
    if (target != NULL) {
        guard = NULL;
        siglongjmp(*target, 1); /* restores the mask saved by sigsetjmp(.., 1) */
    }
    sigaction(sig, &previous, NULL);
    if (info != NULL && info->si_code <= 0) {
        raise(sig); /* sent, not a fault: it would not come again by itself */
    }
}

static PyObject *copy(PyObject *module, PyObject *args) {
    Py_buffer target, source;
    sigjmp_buf here;
    volatile int faulted = 0;
    (void)module;
    if (!PyArg_ParseTuple(args, "w*y*:copy", &target, &source)) {
        return NULL;
    }
    if (target.len != source.len) {
        PyErr_Format(PyExc_ValueError, "copy: %zd bytes into %zd", source.len, target.len);
        PyBuffer_Release(&target);
        PyBuffer_Release(&source);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    guard = NULL; /* its thread-local slot exists before the handler could read it */
    if (sigsetjmp(here, 1) == 0) {
        guard = &here;
        atomic_signal_fence(memory_order_seq_cst);
        memcpy(target.buf, source.buf, (size_t)target.len);
        atomic_signal_fence(memory_order_seq_cst);
        guard = NULL;
    } else {
        faulted = 1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&target);
    PyBuffer_Release(&source);
    return PyBool_FromLong(!faulted);
}

static PyMethodDef methods[] = {
    {"copy", copy, METH_VARARGS,
     "copy(target, source) -> bool: copy equal-sized buffers; False if a page of either was "
     "gone (SIGBUS), with the target then partly written."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_guarded_copy",
    "memcpy guarded against SIGBUS, for mappings of files another process may shrink.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__guarded_copy(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &previous) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return NULL;
    }
    return PyModule_Create(&module_def);
}
