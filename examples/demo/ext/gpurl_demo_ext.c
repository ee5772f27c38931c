/* A compiled module: importing it proves the wheel-builder's wheel was installed. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *add(PyObject *self, PyObject *args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) {
        return NULL;
    }
    return PyLong_FromLong(a + b);
}

static PyMethodDef methods[] = {
    {"add", add, METH_VARARGS, "Add two integers in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gpurl_demo_ext", "Demo C extension.", -1, methods,
};

#ifndef GPURL_ARCH_LIST
#define GPURL_ARCH_LIST ""
#endif

/* ARCH_LIST: the TORCH_CUDA_ARCH_LIST the compile was given (setup.py). */
PyMODINIT_FUNC PyInit_gpurl_demo_ext(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "ARCH_LIST", GPURL_ARCH_LIST) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
