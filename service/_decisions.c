/* Decision ids and the per-decision generator in C (issue 19).
 *
 * service.sampling defines what these compute; this module only makes it cheap. Per decision the
 * Python path spends about 2 us on its id (os.urandom or a keyed blake2b, then base64), on seeding
 * its generator (blake2b of the id, two 128-bit ints, an object) and on random() in Python
 * integers: more than a whole sparse Banditron decision. Here each is one C call:
 *   - BLAKE2b (RFC 7693, sequential mode, keyed or not, any digest size up to 64 bytes), checked
 *     against hashlib on every length in tests/service/core/test_decisions_c.py;
 *   - Ids: ids of 16 bytes as 22 URL-safe base64 characters, either from the OS's CSPRNG (read in
 *     blocks of 4 KiB; a fork empties the block, so parent and child never share bytes) or
 *     blake2b(counter as 16 little-endian bytes, key=secret, digest_size=16);
 *   - Pcg64: numpy's PCG64 (128-bit LCG, XSL-RR output) with its random() (next64 >> 11) * 2^-53,
 *     integers(high) by Lemire's rejection on buffered 32-bit halves, and a fill of float64 buffers;
 *     anything else is handed to the Python subclass (service.sampling.DecisionRng), which moves to
 *     a real numpy Generator at the current state.
 * The Python fallbacks compute the same bits; the tests run both.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>

/* ---------------------------------------------------------------- BLAKE2b (RFC 7693) */

static const uint64_t B2_IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t B2_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

static inline uint64_t
load64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint64_t
rotr64(uint64_t x, int n)
{
    return (x >> n) | (x << (64 - n));
}

#define B2_G(a, b, c, d, x, y)          \
    do {                                \
        v[a] = v[a] + v[b] + (x);       \
        v[d] = rotr64(v[d] ^ v[a], 32); \
        v[c] = v[c] + v[d];             \
        v[b] = rotr64(v[b] ^ v[c], 24); \
        v[a] = v[a] + v[b] + (y);       \
        v[d] = rotr64(v[d] ^ v[a], 16); \
        v[c] = v[c] + v[d];             \
        v[b] = rotr64(v[b] ^ v[c], 63); \
    } while (0)

static void
b2_compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last)
{
    uint64_t v[16], m[16];
    for (int i = 0; i < 16; i++)
        m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = B2_IV[i];
    }
    v[12] ^= t; /* the high word of the byte counter stays 0: messages here are short */
    if (last)
        v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = B2_SIGMA[r];
        B2_G(0, 4, 8, 12, m[s[0]], m[s[1]]);
        B2_G(1, 5, 9, 13, m[s[2]], m[s[3]]);
        B2_G(2, 6, 10, 14, m[s[4]], m[s[5]]);
        B2_G(3, 7, 11, 15, m[s[6]], m[s[7]]);
        B2_G(0, 5, 10, 15, m[s[8]], m[s[9]]);
        B2_G(1, 6, 11, 12, m[s[10]], m[s[11]]);
        B2_G(2, 7, 8, 13, m[s[12]], m[s[13]]);
        B2_G(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++)
        h[i] ^= v[i] ^ v[i + 8];
}

/* out (outlen in 1..64) = BLAKE2b(msg, key) with keylen in 0..64, as hashlib.blake2b computes it. */
static void
blake2b(uint8_t *out, size_t outlen, const uint8_t *key, size_t keylen, const uint8_t *msg, size_t len)
{
    uint64_t h[8];
    uint8_t block[128];
    uint64_t t = 0;
    memcpy(h, B2_IV, sizeof h);
    h[0] ^= 0x01010000ULL ^ ((uint64_t)keylen << 8) ^ (uint64_t)outlen;
    if (keylen) {
        memset(block, 0, sizeof block);
        memcpy(block, key, keylen);
        t = 128;
        b2_compress(h, block, t, len == 0);
    }
    if (len || !keylen) {
        while (len > 128) { /* every full block but the last */
            t += 128;
            b2_compress(h, msg, t, 0);
            msg += 128;
            len -= 128;
        }
        memset(block, 0, sizeof block);
        memcpy(block, msg, len);
        t += len;
        b2_compress(h, block, t, 1);
    }
    for (size_t i = 0; i < outlen; i++)
        out[i] = (uint8_t)(h[i / 8] >> (8 * (i % 8)));
}

static PyObject *
py_blake2b(PyObject *module, PyObject *args)
{
    Py_buffer msg, key;
    Py_ssize_t size;
    uint8_t out[64];
    if (!PyArg_ParseTuple(args, "y*y*n", &msg, &key, &size))
        return NULL;
    PyObject *res = NULL;
    if (size < 1 || size > 64 || key.len > 64)
        PyErr_SetString(PyExc_ValueError, "digest size must be 1..64 and the key at most 64 bytes");
    else {
        blake2b(out, (size_t)size, key.buf, (size_t)key.len, msg.buf, (size_t)msg.len);
        res = PyBytes_FromStringAndSize((const char *)out, size);
    }
    PyBuffer_Release(&msg);
    PyBuffer_Release(&key);
    return res;
}

/* ---------------------------------------------------------------- decision ids */

static const char B64URL[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* 16 bytes -> 22 URL-safe base64 characters without padding (base64.urlsafe_b64encode, rstrip =) */
static PyObject *
id_text(const uint8_t raw[16])
{
    char s[22];
    int j = 0;
    for (int i = 0; i < 15; i += 3) {
        uint32_t w = ((uint32_t)raw[i] << 16) | ((uint32_t)raw[i + 1] << 8) | raw[i + 2];
        s[j++] = B64URL[(w >> 18) & 63];
        s[j++] = B64URL[(w >> 12) & 63];
        s[j++] = B64URL[(w >> 6) & 63];
        s[j++] = B64URL[w & 63];
    }
    s[j++] = B64URL[raw[15] >> 2];
    s[j++] = B64URL[(raw[15] & 3) << 4];
    return PyUnicode_FromStringAndSize(s, 22);
}

#define POOL_BYTES 4096
static uint8_t pool[POOL_BYTES];
static size_t pool_pos = POOL_BYTES; /* empty */

static void
empty_pool_in_child(void)
{
    /* a forked child must not hand out the ids its parent will hand out */
    pool_pos = POOL_BYTES;
}

/* 16 bytes from the OS's CSPRNG, buffered; the GIL serialises callers. -1 with an OSError set. */
static int
random_bytes16(uint8_t out[16])
{
    if (pool_pos + 16 > POOL_BYTES) {
        size_t got = 0;
        while (got < POOL_BYTES) {
            ssize_t n = getrandom(pool + got, POOL_BYTES - got, 0);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                PyErr_SetFromErrno(PyExc_OSError);
                return -1;
            }
            got += (size_t)n;
        }
        pool_pos = 0;
    }
    memcpy(out, pool + pool_pos, 16);
    memset(pool + pool_pos, 0, 16); /* an id's bytes do not stay in memory after it is issued */
    pool_pos += 16;
    return 0;
}

typedef struct {
    PyObject_HEAD
    uint8_t key[64];
    Py_ssize_t keylen; /* -1: no secret, ids from the CSPRNG */
    uint64_t counter;
} IdsObject;

static int
ids_init(IdsObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"secret", NULL};
    PyObject *secret = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &secret))
        return -1;
    self->counter = 0;
    self->keylen = -1;
    if (secret == Py_None)
        return 0;
    if (!PyBytes_Check(secret)) {
        PyErr_SetString(PyExc_TypeError, "secret must be bytes or None");
        return -1;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(secret);
    if (n > 64) {
        PyErr_SetString(PyExc_ValueError, "the secret of decision ids is at most 64 bytes (a blake2b key)");
        return -1;
    }
    memcpy(self->key, PyBytes_AS_STRING(secret), (size_t)n);
    self->keylen = n;
    return 0;
}

static PyObject *
ids_new(IdsObject *self, PyObject *Py_UNUSED(ignored))
{
    uint8_t raw[16];
    if (self->keylen < 0) {
        if (random_bytes16(raw) < 0)
            return NULL;
    } else {
        uint8_t msg[16] = {0};
        uint64_t n = self->counter++;
        for (int i = 0; i < 8; i++)
            msg[i] = (uint8_t)(n >> (8 * i));
        blake2b(raw, 16, self->key, (size_t)self->keylen, msg, 16);
    }
    return id_text(raw);
}

static PyObject *
ids_get_counter(IdsObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->counter);
}

static PyMethodDef ids_methods[] = {
    {"new", (PyCFunction)ids_new, METH_NOARGS, "The next decision id (22 URL-safe characters)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ids_getset[] = {
    {"issued", (getter)ids_get_counter, NULL, "How many ids a keyed source has issued.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject IdsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "service._decisions.Ids",
    .tp_basicsize = sizeof(IdsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Decision ids: Ids(None) from the OS's CSPRNG, Ids(secret) keyed blake2b of a counter.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ids_init,
    .tp_methods = ids_methods,
    .tp_getset = ids_getset,
};

/* ---------------------------------------------------------------- PCG64 */

typedef unsigned __int128 u128;
#define PCG_MULT (((u128)0x2360ED051FC65DA4ULL << 64) | 0x4385DF649FCCF645ULL)
/* PCG_MULT's inverse modulo 2^128: the LCG stepped backwards, to take a draw back */
#define PCG_MULT_INV (((u128)0x07DDA22B93979860ULL << 64) | 0x98ABC8B0716EAC8DULL)

typedef struct {
    PyObject_HEAD
    u128 state, inc;
    int has32;
    uint32_t u32;
    PyObject *gen; /* the numpy Generator the Python subclass moved to, or NULL */
} RngObject;

static inline uint64_t
pcg_next64(RngObject *r)
{
    u128 s = r->state = r->state * PCG_MULT + r->inc;
    uint64_t x = (uint64_t)(s >> 64) ^ (uint64_t)s;
    unsigned rot = (unsigned)(s >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

static inline uint32_t
pcg_next32(RngObject *r)
{
    if (r->has32) {
        r->has32 = 0;
        return r->u32;
    }
    uint64_t n = pcg_next64(r);
    r->has32 = 1;
    r->u32 = (uint32_t)(n >> 32);
    return (uint32_t)n;
}

static inline double
pcg_double(RngObject *r)
{
    return (double)(pcg_next64(r) >> 11) * (1.0 / 9007199254740992.0);
}

static PyObject *
u128_to_long(u128 v)
{
    PyObject *hi = PyLong_FromUnsignedLongLong((unsigned long long)(v >> 64));
    PyObject *lo = PyLong_FromUnsignedLongLong((unsigned long long)v);
    PyObject *sh = PyLong_FromLong(64);
    PyObject *res = NULL, *t = NULL;
    if (hi && lo && sh && (t = PyNumber_Lshift(hi, sh)))
        res = PyNumber_Or(t, lo);
    Py_XDECREF(t);
    Py_XDECREF(sh);
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    return res;
}

/* v modulo 2^128 (numpy's PCG64 takes its state so), from the two 64-bit words of v. */
static int
long_to_u128(PyObject *v, u128 *out)
{
    if (!PyLong_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "state and inc must be int");
        return -1;
    }
    PyObject *sh = PyLong_FromLong(64);
    PyObject *hi = sh ? PyNumber_Rshift(v, sh) : NULL;
    Py_XDECREF(sh);
    if (!hi)
        return -1;
    unsigned long long h = PyLong_AsUnsignedLongLongMask(hi);
    Py_DECREF(hi);
    unsigned long long l = PyLong_AsUnsignedLongLongMask(v);
    if (PyErr_Occurred())
        return -1;
    *out = ((u128)h << 64) | l;
    return 0;
}

static int
rng_init(RngObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"state", "inc", NULL};
    PyObject *state, *inc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO", kwlist, &state, &inc))
        return -1;
    if (long_to_u128(state, &self->state) < 0 || long_to_u128(inc, &self->inc) < 0)
        return -1;
    self->has32 = 0;
    self->u32 = 0;
    Py_CLEAR(self->gen);
    return 0;
}

static void
rng_dealloc(RngObject *self)
{
    Py_CLEAR(self->gen);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Hand a call the C path does not take to the Python subclass's method ``name``. */
static PyObject *
rng_defer(PyObject *self, const char *name, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *meth = PyObject_GetAttrString(self, name);
    if (!meth)
        return NULL;
    PyObject *res = PyObject_Vectorcall(meth, args, nargsf, kwnames);
    Py_DECREF(meth);
    return res;
}

static PyObject *np_int64 = NULL; /* numpy.int64, imported on first use */
static PyObject *np_empty = NULL; /* numpy.empty, imported on first use */

/* numpy's attribute `name`, imported into *slot on first use; 0, or -1 with an exception set. */
static int
numpy_attr(PyObject **slot, const char *name)
{
    if (*slot != NULL)
        return 0;
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np)
        return -1;
    *slot = PyObject_GetAttrString(np, name);
    Py_DECREF(np);
    return *slot ? 0 : -1;
}

static PyObject *rng_fill(RngObject *self, PyObject *arg);

static PyObject *
rng_random(RngObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (self->gen == NULL && nargs == 0 && kwnames == NULL)
        return PyFloat_FromDouble(pcg_double(self));
    /* random(n): numpy.empty(n) filled here (the tree boosters draw one per tree and label per
     * decision; through the Python method it cost a few microseconds more) */
    if (self->gen == NULL && nargs == 1 && kwnames == NULL && PyLong_CheckExact(args[0])) {
        if (numpy_attr(&np_empty, "empty") < 0)
            return NULL;
        PyObject *out = PyObject_CallOneArg(np_empty, args[0]);
        if (!out)
            return NULL;
        PyObject *done = rng_fill(self, out);
        if (!done) {
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(done);
        return out;
    }
    return rng_defer((PyObject *)self, "_random", args, (size_t)nargs, kwnames);
}

static PyObject *
rng_integers(RngObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (self->gen == NULL && nargs == 1 && kwnames == NULL && PyLong_CheckExact(args[0])) {
        int overflow = 0;
        long long high = PyLong_AsLongLongAndOverflow(args[0], &overflow);
        if (!overflow && high > 0 && high <= (1LL << 32)) {
            uint64_t out;
            if (high == (1LL << 32))
                out = pcg_next32(self);
            else { /* numpy's buffered_bounded_lemire_uint32 for [0, high - 1] */
                uint32_t rng_excl = (uint32_t)high;
                uint64_t m = (uint64_t)pcg_next32(self) * rng_excl;
                uint32_t leftover = (uint32_t)m;
                if (leftover < rng_excl) {
                    uint32_t threshold = (uint32_t)(UINT32_MAX - (rng_excl - 1)) % rng_excl;
                    while (leftover < threshold) {
                        m = (uint64_t)pcg_next32(self) * rng_excl;
                        leftover = (uint32_t)m;
                    }
                }
                out = m >> 32;
            }
            if (numpy_attr(&np_int64, "int64") < 0)
                return NULL;
            PyObject *v = PyLong_FromUnsignedLongLong(out);
            if (!v)
                return NULL;
            PyObject *res = PyObject_CallOneArg(np_int64, v);
            Py_DECREF(v);
            return res;
        }
        if (PyErr_Occurred())
            return NULL;
    }
    return rng_defer((PyObject *)self, "_integers", args, (size_t)nargs, kwnames);
}

static PyObject *
rng_fill(RngObject *self, PyObject *arg)
{
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (buf.itemsize != sizeof(double) || (buf.format && strcmp(buf.format, "d") != 0)) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_TypeError, "_fill takes a C-contiguous float64 buffer");
        return NULL;
    }
    double *out = buf.buf;
    Py_ssize_t n = buf.len / (Py_ssize_t)sizeof(double);
    for (Py_ssize_t i = 0; i < n; i++)
        out[i] = pcg_double(self);
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
}

static PyObject *
rng_get_state(RngObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *s = u128_to_long(self->state);
    PyObject *i = u128_to_long(self->inc);
    PyObject *res = NULL;
    if (s && i)
        res = self->has32 ? Py_BuildValue("(OOk)", s, i, (unsigned long)self->u32)
                          : Py_BuildValue("(OOO)", s, i, Py_None);
    Py_XDECREF(s);
    Py_XDECREF(i);
    return res;
}

/* Take back the last 64-bit draw (a random()): the state one LCG step back. Only for a draw made
   here (not by the numpy Generator moved to), and not one whose 32-bit half is buffered. */
static PyObject *
rng_unread(RngObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->gen != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_unread: the draws are the numpy Generator's now");
        return NULL;
    }
    self->state = (self->state - self->inc) * PCG_MULT_INV;
    Py_RETURN_NONE;
}

static PyMethodDef rng_methods[] = {
    {"random", (PyCFunction)(void (*)(void))rng_random, METH_FASTCALL | METH_KEYWORDS,
     "Uniform doubles in [0, 1), as numpy.random.Generator.random (random() here, else _random)."},
    {"integers", (PyCFunction)(void (*)(void))rng_integers, METH_FASTCALL | METH_KEYWORDS,
     "numpy.random.Generator.integers (integers(high), 0 < high <= 2^32, here; else _integers)."},
    {"_fill", (PyCFunction)rng_fill, METH_O, "Fill a C-contiguous float64 buffer with random() draws."},
    {"_unread", (PyCFunction)rng_unread, METH_NOARGS, "Take back the last random() (one step back)."},
    {"_get_state", (PyCFunction)rng_get_state, METH_NOARGS,
     "(state, inc, buffered 32-bit half or None), to set a numpy PCG64 at this generator's state."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef rng_members[] = {
    {"_gen", T_OBJECT, offsetof(RngObject, gen), 0, "The numpy Generator moved to, or None."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RngType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "service._decisions.Pcg64",
    .tp_basicsize = sizeof(RngObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, /* no GC: a numpy Generator cannot refer back */
    .tp_doc = "numpy's PCG64 at (state, inc), with random() and integers(high) in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)rng_init,
    .tp_dealloc = (destructor)rng_dealloc,
    .tp_methods = rng_methods,
    .tp_members = rng_members,
};

static PyTypeObject *rng_class = NULL; /* the type decision_rng makes (set_rng_class) */

static PyObject *
set_rng_class(PyObject *module, PyObject *cls)
{
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &RngType)) {
        PyErr_SetString(PyExc_TypeError, "set_rng_class takes a subclass of Pcg64");
        return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(rng_class, (PyTypeObject *)cls);
    Py_RETURN_NONE;
}

/* decision_rng(id): the generator at state blake2b(id, 32)[:16], inc blake2b(id, 32)[16:] | 1. */
static PyObject *
decision_rng(PyObject *module, PyObject *arg)
{
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(arg, &len);
    if (!s)
        return NULL;
    uint8_t h[32];
    blake2b(h, 32, NULL, 0, (const uint8_t *)s, (size_t)len);
    PyTypeObject *tp = rng_class ? rng_class : &RngType;
    RngObject *r = (RngObject *)tp->tp_alloc(tp, 0);
    if (!r)
        return NULL;
    u128 state = 0, inc = 0;
    for (int i = 15; i >= 0; i--) {
        state = (state << 8) | h[i];
        inc = (inc << 8) | h[16 + i];
    }
    r->state = state;
    r->inc = inc | 1;
    return (PyObject *)r;
}

static PyMethodDef module_methods[] = {
    {"blake2b", py_blake2b, METH_VARARGS,
     "blake2b(data, key, digest_size) -> bytes, as hashlib.blake2b(data, key=key, digest_size=...)."},
    {"decision_rng", decision_rng, METH_O, "The generator of decision id ``id`` (service.sampling)."},
    {"set_rng_class", set_rng_class, METH_O, "The Pcg64 subclass decision_rng returns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "service._decisions", "Decision ids and generators in C (issue 19).", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__decisions(void)
{
    if (PyType_Ready(&IdsType) < 0 || PyType_Ready(&RngType) < 0)
        return NULL;
    if (pthread_atfork(NULL, NULL, empty_pool_in_child) != 0)
        return PyErr_Format(PyExc_OSError, "pthread_atfork failed");
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    Py_INCREF(&IdsType);
    Py_INCREF(&RngType);
    if (PyModule_AddObject(m, "Ids", (PyObject *)&IdsType) < 0 ||
        PyModule_AddObject(m, "Pcg64", (PyObject *)&RngType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
