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

PyMODINIT_FUNC PyInit_gpurl_demo_ext(void) { return PyModule_Create(&module); }
