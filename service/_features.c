/* The hashed featuriser's hot loop in C (issue 19): named features -> sorted (bucket, value) pairs.
 *
 * service.features.Featuriser keeps, per model, the bucket of every feature key it has seen
 * (strings: name -> value -> bucket; numbers and bools: name -> bucket). Looking those up from a
 * request's dict is most of a hashed request's learning cost in Python (a few dozen dict lookups,
 * list and array building, a sort); here it is one call. The result is exactly what the Python
 * path computes (tests/service/test_features.py checks both on the same requests):
 *   - a string value adds 1 at the bucket of "name=value", a bool 1 or 0, a number float(value);
 *   - pairs sorted by bucket, colliding values summed in request order, zero sums dropped.
 * Anything this loop does not handle returns a negative code and the caller takes the Python path,
 * which remembers new keys and words the error of bad input:
 *   -1 a key not seen before (or a non-exact dict of features), -2 a value of another type or out
 *   of range (NaN, infinite, magnitude above the limit), -3 output buffers too small.
 * No numpy headers: the outputs are any writable buffers of int64 and float64 (numpy arrays).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

static PyObject *
featurise(PyObject *self, PyObject *args)
{
    PyObject *features, *strings, *numbers;
    Py_buffer ibuf, vbuf;
    double max_abs;
    if (!PyArg_ParseTuple(args, "O!O!O!w*w*d", &PyDict_Type, &features, &PyDict_Type, &strings,
                          &PyDict_Type, &numbers, &ibuf, &vbuf, &max_abs))
        return NULL;
    Py_ssize_t cap_i = ibuf.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t cap_v = vbuf.len / (Py_ssize_t)sizeof(double);
    int64_t *idx = (int64_t *)ibuf.buf;
    double *val = (double *)vbuf.buf;
    Py_ssize_t n = 0, code = 0;
    if (!PyDict_CheckExact(features)) {
        code = -1;
        goto done;
    }
    if (PyDict_GET_SIZE(features) > cap_i || PyDict_GET_SIZE(features) > cap_v) {
        code = -3;
        goto done;
    }
    Py_ssize_t pos = 0;
    PyObject *name, *value;
    while (PyDict_Next(features, &pos, &name, &value)) {
        PyObject *b;
        double v;
        if (PyUnicode_Check(value)) {
            PyObject *per = PyDict_GetItemWithError(strings, name);
            if (per == NULL || !PyDict_CheckExact(per)) {
                code = PyErr_Occurred() ? -4 : -1;
                goto done;
            }
            b = PyDict_GetItemWithError(per, value);
            v = 1.0;
        } else {
            if (PyBool_Check(value)) {
                v = value == Py_True ? 1.0 : 0.0;
            } else if (PyFloat_CheckExact(value)) {
                v = PyFloat_AS_DOUBLE(value);
            } else if (PyLong_CheckExact(value)) {
                v = PyLong_AsDouble(value);
                if (v == -1.0 && PyErr_Occurred()) {
                    PyErr_Clear();  /* beyond a double: the Python path words the error */
                    code = -2;
                    goto done;
                }
            } else {
                code = -2;
                goto done;
            }
            if (!(fabs(v) <= max_abs)) {  /* NaN fails too */
                code = -2;
                goto done;
            }
            b = PyDict_GetItemWithError(numbers, name);
        }
        if (b == NULL) {
            code = PyErr_Occurred() ? -4 : -1;
            goto done;
        }
        long long bucket = PyLong_AsLongLong(b);
        if (bucket == -1 && PyErr_Occurred()) {
            code = -4;
            goto done;
        }
        /* Insertion sort as we go (a few dozen entries): stable, so equal buckets keep request
           order and their values add up in that order, as the Python path's stable sort. */
        Py_ssize_t i = n;
        while (i > 0 && idx[i - 1] > bucket) {
            idx[i] = idx[i - 1];
            val[i] = val[i - 1];
            i--;
        }
        idx[i] = bucket;
        val[i] = v;
        n++;
    }
    /* Merge equal buckets (summing in order), then drop zero sums. */
    Py_ssize_t m = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (m >= 0 && idx[m] == idx[i]) {
            val[m] += val[i];
        } else {
            m++;
            idx[m] = idx[i];
            val[m] = val[i];
        }
    }
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i <= m; i++) {
        if (val[i] != 0.0) {
            idx[kept] = idx[i];
            val[kept] = val[i];
            kept++;
        }
    }
    code = kept;
done:
    PyBuffer_Release(&ibuf);
    PyBuffer_Release(&vbuf);
    if (code == -4)
        return NULL; /* an exception is set (e.g. a str subclass whose __hash__ raised) */
    return PyLong_FromSsize_t(code);
}

static PyMethodDef methods[] = {
    {"featurise", featurise, METH_VARARGS,
     "featurise(features, strings, numbers, idx, val, max_abs) -> n: the first n entries of idx "
     "and val are the request's sparse vector; a negative n: take the Python path."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_features", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__features(void)
{
    return PyModule_Create(&module);
}
