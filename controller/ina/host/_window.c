/* The worker's per-packet path, compiled (ina.host._window): the window of one
 * reduction (Window, the base of ina.host.window.ReductionWindow), the
 * retransmission timeout (Rto, of ina.host.window.RtoEstimator) and the congestion
 * controller's arithmetic (Congestion, of ina.host.congestion.CongestionWindow).
 *
 * What each does, and why, is said once, in the Python modules that subclass these
 * types: this file is their only implementation. Every constant comes from those
 * modules through configure_window() and configure_congestion(), called once as
 * each is imported, so that a value lives in one place. Python keeps what happens once per reduction: the
 * plan (ina.host.window.plan_chunks), the lead's check, the result's conversion.
 *
 * Every read of a received payload is bounded by its length: a payload shorter
 * than the header, or than the array a field says it carries, is refused before a
 * byte beyond its end is read (tests/test_window_fuzz.py, the sanitizers' tier).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------------
 * Constants, from Python (configure).
 */
#define MAX_RING 64 /* the largest RECENT_SAMPLES / BASE_BUCKETS this file holds */

static struct {
    int window_configured, congestion_configured;
    /* the wire */
    long header_bytes, array_bytes, max_lead;
    long off_flags, off_seq, off_count, off_width, off_ecn;
    long f_result, f_nodata, f_overflow, f_query, f_reply, f_not_answer;
    long op_copy, ecn_ce, width32, held_verdict;
    /* the window */
    long duplicate_results, max_backoff_doublings, max_probe_doublings;
    double rtt_clip;
    /* the congestion controller */
    long recent_samples, base_buckets, pacing_burst;
    double min_cwnd, dctcp_g, base_period, delay_factor, delay_slack, delay_beta;
    double max_decrease, silence, pacing_quantum;
} K;

typedef struct { const char *name; long *l; double *d; } ConstSlot;

/* The window's and the RTO's (ina.host.window), the congestion controller's
 * (ina.host.congestion): each module configures its own. */
static ConstSlot WINDOW_CONSTANTS[] = {
    {"INA_HEADER_BYTES", &K.header_bytes, NULL}, {"ARRAY_BYTES", &K.array_bytes, NULL},
    {"MAX_LEAD", &K.max_lead, NULL},
    {"OFF_FLAGS", &K.off_flags, NULL}, {"OFF_SEQ", &K.off_seq, NULL},
    {"OFF_COUNT", &K.off_count, NULL}, {"OFF_WIDTH", &K.off_width, NULL},
    {"OFF_ECN", &K.off_ecn, NULL},
    {"RESULT", &K.f_result, NULL}, {"NODATA", &K.f_nodata, NULL},
    {"OVERFLOW", &K.f_overflow, NULL}, {"QUERY", &K.f_query, NULL},
    {"REPLY", &K.f_reply, NULL}, {"NOT_ANSWER", &K.f_not_answer, NULL},
    {"OP_COPY", &K.op_copy, NULL}, {"ECN_CE", &K.ecn_ce, NULL},
    {"WIDTH32", &K.width32, NULL}, {"HELD", &K.held_verdict, NULL},
    {"DUPLICATE_RESULTS", &K.duplicate_results, NULL},
    {"MAX_BACKOFF_DOUBLINGS", &K.max_backoff_doublings, NULL},
    {"MAX_PROBE_DOUBLINGS", &K.max_probe_doublings, NULL},
    {"RTT_CLIP", NULL, &K.rtt_clip},
    {NULL, NULL, NULL},
};

static ConstSlot CONGESTION_CONSTANTS[] = {
    {"RECENT_SAMPLES", &K.recent_samples, NULL}, {"BASE_BUCKETS", &K.base_buckets, NULL},
    {"PACING_BURST", &K.pacing_burst, NULL},
    {"MIN_CWND", NULL, &K.min_cwnd}, {"DCTCP_G", NULL, &K.dctcp_g},
    {"BASE_PERIOD", NULL, &K.base_period}, {"DELAY_FACTOR", NULL, &K.delay_factor},
    {"DELAY_SLACK", NULL, &K.delay_slack}, {"DELAY_BETA", NULL, &K.delay_beta},
    {"MAX_DECREASE", NULL, &K.max_decrease}, {"SILENCE", NULL, &K.silence},
    {"PACING_QUANTUM", NULL, &K.pacing_quantum},
    {NULL, NULL, NULL},
};

static PyObject *LOG_FN = NULL; /* log(level, message): the module's logger */

#define LOG_DEBUG 10
#define LOG_WARNING 30

/* Log through Python's logging (a callable from configure); an error in it is
 * reported as unraisable, not raised into the packet path. */
static void log_msg(int level, const char *fmt, ...) {
    if (LOG_FN == NULL)
        return;
    char text[256];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof(text), fmt, args);
    va_end(args);
    PyObject *msg = PyUnicode_FromString(text);
    if (msg == NULL) {
        PyErr_WriteUnraisable(NULL);
        return;
    }
    PyObject *r = PyObject_CallFunction(LOG_FN, "iO", level, msg);
    Py_DECREF(msg);
    if (r == NULL)
        PyErr_WriteUnraisable(LOG_FN);
    Py_XDECREF(r);
}

/* Read every constant of `table` from `kwargs` (and a `log` callable): the names
 * must be exactly the table's. */
static int read_constants(ConstSlot *table, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) != 0 || kwargs == NULL) {
        PyErr_SetString(PyExc_TypeError, "configure takes keyword arguments only");
        return -1;
    }
    Py_ssize_t expected = 1; /* log */
    for (ConstSlot *c = table; c->name; c++, expected++) {
        PyObject *v = PyDict_GetItemString(kwargs, c->name);
        if (v == NULL) {
            PyErr_Format(PyExc_TypeError, "configure: %s missing", c->name);
            return -1;
        }
        if (c->l)
            *c->l = PyLong_AsLong(v);
        else
            *c->d = PyFloat_AsDouble(v);
        if (PyErr_Occurred())
            return -1;
    }
    if (PyDict_GET_SIZE(kwargs) != expected) {
        PyErr_SetString(PyExc_TypeError, "configure: unknown constants given");
        return -1;
    }
    PyObject *log = PyDict_GetItemString(kwargs, "log");
    if (log == NULL || !PyCallable_Check(log)) {
        PyErr_SetString(PyExc_TypeError, "configure: log must be a callable");
        return -1;
    }
    Py_XSETREF(LOG_FN, Py_NewRef(log));
    return 0;
}

static PyObject *configure_congestion(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    if (read_constants(CONGESTION_CONSTANTS, args, kwargs) < 0)
        return NULL;
    if (K.recent_samples < 1 || K.recent_samples > MAX_RING || K.base_buckets < 1
        || K.base_buckets > MAX_RING) {
        PyErr_SetString(PyExc_ValueError, "configure: a ring's size is out of 1..64");
        return NULL;
    }
    K.congestion_configured = 1;
    Py_RETURN_NONE;
}

static PyObject *configure_window(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    if (read_constants(WINDOW_CONSTANTS, args, kwargs) < 0)
        return NULL;
    if (K.header_bytes < 16 || K.header_bytes > 256 || K.max_lead * 4 > K.array_bytes
        || K.off_seq + 4 > K.header_bytes || K.off_ecn >= K.header_bytes
        || K.off_width >= K.header_bytes || K.off_count + 2 > K.header_bytes) {
        PyErr_SetString(PyExc_ValueError, "configure: the header's layout is inconsistent");
        return NULL;
    }
    K.window_configured = 1;
    Py_RETURN_NONE;
}

/* The congestion controller needs its constants, the RTO and the window all. */
static int check_configured(int window) {
    if (!K.congestion_configured || (window && !K.window_configured)) {
        PyErr_SetString(PyExc_RuntimeError, "ina.host._window is used before ina.host."
                        "congestion and ina.host.window configured it");
        return -1;
    }
    return 0;
}

/* A double or None, for the attributes that may be unset (srtt, base_rtt). */
static PyObject *opt_double(int has, double v) {
    if (!has)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(v);
}

static int parse_opt_double(PyObject *o, int *has, double *v) {
    if (o == NULL || o == Py_None) {
        *has = 0;
        return 0;
    }
    double d = PyFloat_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred())
        return -1;
    *has = 1;
    *v = d;
    return 0;
}

/* A fixed-capacity ring of the newest `cap` doubles (a deque with maxlen). */
typedef struct {
    double v[MAX_RING];
    int n, head; /* head: where the oldest is */
} Ring;

static void ring_push(Ring *r, int cap, double x) {
    if (r->n < cap) {
        r->v[(r->head + r->n) % cap] = x;
        r->n++;
    } else {
        r->v[r->head] = x;
        r->head = (r->head + 1) % cap;
    }
}

static double ring_min(const Ring *r) {
    double m = INFINITY;
    for (int i = 0; i < r->n; i++)
        if (r->v[i] < m)
            m = r->v[i];
    return m;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static PyObject *ring_tuple(const Ring *r, int cap) {
    PyObject *t = PyTuple_New(r->n);
    if (t == NULL)
        return NULL;
    for (int i = 0; i < r->n; i++) {
        PyObject *f = PyFloat_FromDouble(r->v[(r->head + i) % cap]);
        if (f == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, f);
    }
    return t;
}

/* ------------------------------------------------------------------------------
 * Rto: the retransmission timeout (ina.host.window.RtoEstimator says how and why).
 */
typedef struct {
    PyObject_HEAD
    double initial, floor, cap, srtt, rttvar, backed_off_at;
    int has_srtt, backoff;
    long samples;
    Ring recent;
} RtoObject;

static PyTypeObject RtoType;

static double rto_ceiling(const RtoObject *r) { return r->cap > r->floor ? r->cap : r->floor; }

static double rto_value(const RtoObject *r) {
    double base = r->has_srtt ? r->srtt + 4 * r->rttvar : r->initial;
    double grown = base * (double)(1L << r->backoff);
    double low = grown > r->floor ? grown : r->floor;
    double ceiling = rto_ceiling(r);
    return low < ceiling ? low : ceiling;
}

static void rto_sample(RtoObject *r, double rtt) {
    r->samples++;
    r->backoff = 0;
    ring_push(&r->recent, (int)K.recent_samples, rtt);
    if (!r->has_srtt) {
        r->has_srtt = 1;
        r->srtt = rtt;
        r->rttvar = rtt / 2;
    } else {
        if (rtt > K.rtt_clip * r->srtt)
            rtt = K.rtt_clip * r->srtt;
        r->rttvar = 0.75 * r->rttvar + 0.25 * fabs(r->srtt - rtt);
        r->srtt = 0.875 * r->srtt + 0.125 * rtt;
    }
}

static void rto_bound(RtoObject *r, double rtt) {
    if (!r->has_srtt) {
        double c = rto_ceiling(r);
        double b = rtt < c ? rtt : c;
        if (b > r->initial)
            r->initial = b;
    }
}

static void rto_timed_out(RtoObject *r, double now) {
    if (now - r->backed_off_at >= rto_value(r)) {
        r->backed_off_at = now;
        r->backoff = r->backoff + 1 < K.max_backoff_doublings ? r->backoff + 1
                                                               : (int)K.max_backoff_doublings;
    }
}

/* The probe interval (RtoEstimator.probe); 0 with no sample (None in Python). */
static int rto_probe(const RtoObject *r, int queued, double *out) {
    if (r->recent.n == 0)
        return 0;
    double typical;
    if (queued) {
        double sorted[MAX_RING];
        memcpy(sorted, r->recent.v, sizeof(double) * r->recent.n);
        qsort(sorted, r->recent.n, sizeof(double), cmp_double);
        typical = sorted[r->recent.n / 2];
    } else {
        typical = ring_min(&r->recent);
    }
    double p = 2 * typical;
    if (p < r->floor)
        p = r->floor;
    double c = rto_ceiling(r);
    *out = p < c ? p : c;
    return 1;
}

static int Rto_init(RtoObject *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"initial", "floor", "cap", "srtt", NULL};
    PyObject *srtt = NULL;
    if (check_configured(1) < 0)
        return -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ddd|O", kw, &self->initial, &self->floor,
                                     &self->cap, &srtt))
        return -1;
    self->rttvar = 0.0;
    self->samples = 0;
    self->backoff = 0;
    self->backed_off_at = -INFINITY;
    self->recent.n = self->recent.head = 0;
    return parse_opt_double(srtt, &self->has_srtt, &self->srtt);
}

static PyObject *Rto_sample(RtoObject *self, PyObject *arg) {
    double rtt = PyFloat_AsDouble(arg);
    if (rtt == -1.0 && PyErr_Occurred())
        return NULL;
    rto_sample(self, rtt);
    Py_RETURN_NONE;
}

static PyObject *Rto_progress(RtoObject *self, PyObject *unused) {
    (void)unused;
    self->backoff = 0;
    Py_RETURN_NONE;
}

static PyObject *Rto_bound(RtoObject *self, PyObject *arg) {
    double rtt = PyFloat_AsDouble(arg);
    if (rtt == -1.0 && PyErr_Occurred())
        return NULL;
    rto_bound(self, rtt);
    Py_RETURN_NONE;
}

static PyObject *Rto_timed_out(RtoObject *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"now", NULL};
    double now;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "d", kw, &now))
        return NULL;
    rto_timed_out(self, now);
    Py_RETURN_NONE;
}

static PyObject *Rto_probe(RtoObject *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"queued", NULL};
    int queued = 0;
    double p;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p", kw, &queued))
        return NULL;
    if (!rto_probe(self, queued, &p))
        Py_RETURN_NONE;
    return PyFloat_FromDouble(p);
}

static PyObject *Rto_get_srtt(RtoObject *self, void *c) {
    (void)c;
    return opt_double(self->has_srtt, self->srtt);
}

static int Rto_set_srtt(RtoObject *self, PyObject *v, void *c) {
    (void)c;
    return parse_opt_double(v, &self->has_srtt, &self->srtt);
}

static PyObject *Rto_get_rto(RtoObject *self, void *c) {
    (void)c;
    return PyFloat_FromDouble(rto_value(self));
}

static PyObject *Rto_get_ceiling(RtoObject *self, void *c) {
    (void)c;
    return PyFloat_FromDouble(rto_ceiling(self));
}

static PyObject *Rto_get_recent(RtoObject *self, void *c) {
    (void)c;
    return ring_tuple(&self->recent, (int)K.recent_samples);
}

static PyMethodDef Rto_methods[] = {
    {"sample", (PyCFunction)Rto_sample, METH_O, "A measured round trip."},
    {"progress", (PyCFunction)Rto_progress, METH_NOARGS, "A new result: undo the backoff."},
    {"bound", (PyCFunction)Rto_bound, METH_O, "A round trip took at most this."},
    {"timed_out", (PyCFunction)(void (*)(void))Rto_timed_out, METH_VARARGS | METH_KEYWORDS,
     "A packet's timer expired."},
    {"probe", (PyCFunction)(void (*)(void))Rto_probe, METH_VARARGS | METH_KEYWORDS,
     "How long to wait for the oldest result (None: no sample)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Rto_members[] = {
    {"initial", T_DOUBLE, offsetof(RtoObject, initial), 0, NULL},
    {"floor", T_DOUBLE, offsetof(RtoObject, floor), 0, NULL},
    {"cap", T_DOUBLE, offsetof(RtoObject, cap), 0, NULL},
    {"rttvar", T_DOUBLE, offsetof(RtoObject, rttvar), 0, NULL},
    {"samples", T_LONG, offsetof(RtoObject, samples), 0, NULL},
    {"backoff", T_INT, offsetof(RtoObject, backoff), 0, NULL},
    {"backed_off_at", T_DOUBLE, offsetof(RtoObject, backed_off_at), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Rto_getset[] = {
    {"srtt", (getter)Rto_get_srtt, (setter)Rto_set_srtt, NULL, NULL},
    {"rto", (getter)Rto_get_rto, NULL, NULL, NULL},
    {"ceiling", (getter)Rto_get_ceiling, NULL, NULL, NULL},
    {"recent", (getter)Rto_get_recent, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RtoType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ina.host._window.Rto",
    .tp_basicsize = sizeof(RtoObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The retransmission timeout (ina.host.window.RtoEstimator).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Rto_init,
    .tp_methods = Rto_methods,
    .tp_members = Rto_members,
    .tp_getset = Rto_getset,
};

/* ------------------------------------------------------------------------------
 * Congestion: the congestion window (ina.host.congestion.CongestionWindow).
 */
enum { CUT_MARK, CUT_DELAY, CUT_LOSS, CUT_TIMEOUT, CUTS };
static const char *CUT_NAMES[CUTS] = {"mark", "delay", "loss", "timeout"};

typedef struct {
    PyObject_HEAD
    long limit, results, marked, window_results, window_marked;
    long cuts[CUTS];
    double cwnd, ssthresh, alpha, base_rtt, cut_at;
    int has_base;
    Ring recent;
    /* the base round trip's periods: [start, least round trip] each */
    double min_at[MAX_RING], min_rtt[MAX_RING];
    int mins, mins_head;
} CcObject;

static PyTypeObject CcType;

static long cc_allowed(const CcObject *c) {
    long w = (long)c->cwnd;
    if (w > c->limit)
        w = c->limit;
    return w > 1 ? w : 1;
}

static int cc_target(const CcObject *c, double *t) {
    if (!c->has_base)
        return 0;
    double a = K.delay_factor * c->base_rtt, b = c->base_rtt + K.delay_slack;
    *t = a > b ? a : b;
    return 1;
}

static int cc_queueing(const CcObject *c) {
    double target;
    if (c->recent.n == 0 || !cc_target(c, &target))
        return 0;
    return ring_min(&c->recent) > target;
}

static double cc_interval(const CcObject *c, int has_srtt, double srtt) {
    if (!has_srtt)
        return 0.0;
    return srtt / (c->cwnd > K.min_cwnd ? c->cwnd : K.min_cwnd);
}

static double cc_next_send(const CcObject *c, double send_at, double now, int has_srtt,
                           double srtt) {
    double interval = cc_interval(c, has_srtt, srtt);
    double a = (double)(K.pacing_burst - 1) * interval, b = K.pacing_quantum - interval;
    double burst = a > b ? a : b;
    double from = now - burst;
    return (send_at > from ? send_at : from) + interval;
}

static int cc_may_cut(const CcObject *c, double now, int has_rt, double rt) {
    return now - c->cut_at >= (has_rt ? rt : 0.0);
}

static void cc_cut(CcObject *c, double now, double factor, int why) {
    c->cwnd = c->cwnd * factor;
    if (c->cwnd < K.min_cwnd)
        c->cwnd = K.min_cwnd;
    c->ssthresh = c->cwnd;
    c->cut_at = now;
    c->cuts[why]++;
    log_msg(LOG_DEBUG, "congestion window cut to %.2f (%s)", c->cwnd, CUT_NAMES[why]);
}

static double cc_alpha_now(const CcObject *c) {
    if (c->window_results == 0)
        return c->alpha;
    double now = (1 - K.dctcp_g) * c->alpha
                 + K.dctcp_g * (double)c->window_marked / (double)c->window_results;
    return c->alpha > now ? c->alpha : now;
}

static void cc_on_result(CcObject *c, double now, int marked, int has_rtt, double rtt,
                         int has_srtt, double srtt) {
    c->results++;
    c->window_results++;
    if (marked) {
        c->marked++;
        c->window_marked++;
    }
    if (has_rtt) {
        int buckets = (int)K.base_buckets;
        ring_push(&c->recent, (int)K.recent_samples, rtt);
        int last = (c->mins_head + c->mins - 1) % buckets;
        if (c->mins == 0 || now - c->min_at[last] >= K.base_period) {
            if (c->mins < buckets) {
                last = (c->mins_head + c->mins) % buckets;
                c->mins++;
            } else {
                last = c->mins_head;
                c->mins_head = (c->mins_head + 1) % buckets;
            }
            c->min_at[last] = now;
            c->min_rtt[last] = rtt;
            double m = INFINITY; /* an old period may be gone */
            for (int i = 0; i < c->mins; i++)
                if (c->min_rtt[i] < m)
                    m = c->min_rtt[i];
            c->base_rtt = m;
            c->has_base = 1;
        } else if (rtt < c->min_rtt[last]) {
            c->min_rtt[last] = rtt;
            if (rtt < c->base_rtt)
                c->base_rtt = rtt;
        }
    }
    int has_rt = has_srtt || has_rtt;
    double rt = has_srtt ? srtt : rtt;
    if (marked && cc_may_cut(c, now, has_rt, rt)) {
        cc_cut(c, now, 1.0 - cc_alpha_now(c) / 2, CUT_MARK);
    } else if (has_rtt && cc_queueing(c) && cc_may_cut(c, now, has_rt, rt)) {
        double low = ring_min(&c->recent), target = 0.0;
        cc_target(c, &target);
        double f = 1.0 - K.delay_beta * (low - target) / low, least = 1.0 - K.max_decrease;
        cc_cut(c, now, f > least ? f : least, CUT_DELAY);
    } else if (!marked) {
        double grown = c->cwnd + (c->cwnd < c->ssthresh ? 1.0 : 1.0 / c->cwnd);
        c->cwnd = grown < (double)c->limit ? grown : (double)c->limit;
    }
    if ((double)c->window_results >= c->cwnd) {
        c->alpha = (1 - K.dctcp_g) * c->alpha
                   + K.dctcp_g * ((double)c->window_marked / (double)c->window_results);
        c->window_results = c->window_marked = 0;
    }
}

static void cc_on_loss(CcObject *c, double now, int has_srtt, double srtt) {
    if (cc_queueing(c) && cc_may_cut(c, now, has_srtt, srtt))
        cc_cut(c, now, 0.5, CUT_LOSS);
}

static void cc_on_timeout(CcObject *c, double now, int has_srtt, double srtt, double silent) {
    if (cc_queueing(c)) {
        if (cc_may_cut(c, now, has_srtt, srtt))
            cc_cut(c, now, 0.5, CUT_TIMEOUT);
    } else if (silent >= K.silence && cc_may_cut(c, now, 1, K.silence)) {
        cc_cut(c, now, 0.5, CUT_TIMEOUT);
    }
}

static int Cc_init(CcObject *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"limit", "cwnd", "ssthresh", "alpha", "base_rtt", NULL};
    PyObject *base = NULL;
    if (check_configured(0) < 0)
        return -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "lddd|O", kw, &self->limit, &self->cwnd,
                                     &self->ssthresh, &self->alpha, &base))
        return -1;
    if (self->limit < 1) {
        PyErr_SetString(PyExc_ValueError, "a congestion window's limit is at least one packet");
        return -1;
    }
    if (self->cwnd <= 0)
        self->cwnd = (double)self->limit;
    self->results = self->marked = self->window_results = self->window_marked = 0;
    memset(self->cuts, 0, sizeof(self->cuts));
    self->cut_at = -INFINITY;
    self->recent.n = self->recent.head = 0;
    self->mins = self->mins_head = 0;
    return parse_opt_double(base, &self->has_base, &self->base_rtt);
}

/* (now, srtt) or (now, srtt, silent) and the like: srtt may be None. */
static int parse_srtt(PyObject *o, int *has, double *v) { return parse_opt_double(o, has, v); }

static PyObject *Cc_on_result(CcObject *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"now", "marked", "rtt", "srtt", NULL};
    double now, rtt = 0, srtt = 0;
    int marked, has_rtt, has_srtt;
    PyObject *o_rtt, *o_srtt;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "dpOO", kw, &now, &marked, &o_rtt, &o_srtt)
        || parse_srtt(o_rtt, &has_rtt, &rtt) < 0 || parse_srtt(o_srtt, &has_srtt, &srtt) < 0)
        return NULL;
    cc_on_result(self, now, marked, has_rtt, rtt, has_srtt, srtt);
    Py_RETURN_NONE;
}

static PyObject *Cc_on_loss(CcObject *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"now", "srtt", NULL};
    double now, srtt = 0;
    int has;
    PyObject *o;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "dO", kw, &now, &o)
        || parse_srtt(o, &has, &srtt) < 0)
        return NULL;
    cc_on_loss(self, now, has, srtt);
    Py_RETURN_NONE;
}

static PyObject *Cc_on_timeout(CcObject *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"now", "srtt", "silent", NULL};
    double now, srtt = 0, silent;
    int has;
    PyObject *o;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "dOd", kw, &now, &o, &silent)
        || parse_srtt(o, &has, &srtt) < 0)
        return NULL;
    cc_on_timeout(self, now, has, srtt, silent);
    Py_RETURN_NONE;
}

static PyObject *Cc_interval(CcObject *self, PyObject *arg) {
    double srtt = 0;
    int has;
    if (parse_srtt(arg, &has, &srtt) < 0)
        return NULL;
    return PyFloat_FromDouble(cc_interval(self, has, srtt));
}

static PyObject *Cc_next_send(CcObject *self, PyObject *args) {
    double send_at, now, srtt = 0;
    int has;
    PyObject *o;
    if (!PyArg_ParseTuple(args, "ddO", &send_at, &now, &o) || parse_srtt(o, &has, &srtt) < 0)
        return NULL;
    return PyFloat_FromDouble(cc_next_send(self, send_at, now, has, srtt));
}

static PyObject *Cc_target(CcObject *self, PyObject *unused) {
    (void)unused;
    double t;
    if (!cc_target(self, &t))
        Py_RETURN_NONE;
    return PyFloat_FromDouble(t);
}

static PyObject *Cc_queueing_delay(CcObject *self, PyObject *unused) {
    (void)unused;
    if (self->recent.n == 0)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(ring_min(&self->recent));
}

static PyObject *Cc_queueing(CcObject *self, PyObject *unused) {
    (void)unused;
    return PyBool_FromLong(cc_queueing(self));
}

static PyObject *Cc_get_allowed(CcObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(cc_allowed(self));
}

static PyObject *Cc_get_base_rtt(CcObject *self, void *c) {
    (void)c;
    return opt_double(self->has_base, self->base_rtt);
}

static PyObject *Cc_get_cuts(CcObject *self, void *c) {
    (void)c;
    PyObject *d = PyDict_New();
    for (int i = 0; d != NULL && i < CUTS; i++) {
        PyObject *n = PyLong_FromLong(self->cuts[i]);
        if (n == NULL || PyDict_SetItemString(d, CUT_NAMES[i], n) < 0)
            Py_CLEAR(d);
        Py_XDECREF(n);
    }
    return d;
}

static PyMethodDef Cc_methods[] = {
    {"on_result", (PyCFunction)(void (*)(void))Cc_on_result, METH_VARARGS | METH_KEYWORDS,
     "A new result arrived."},
    {"on_loss", (PyCFunction)(void (*)(void))Cc_on_loss, METH_VARARGS | METH_KEYWORDS,
     "A packet was found lost by later results."},
    {"on_timeout", (PyCFunction)(void (*)(void))Cc_on_timeout, METH_VARARGS | METH_KEYWORDS,
     "The oldest packet's timer fired."},
    {"interval", (PyCFunction)Cc_interval, METH_O, "Seconds between two packets."},
    {"next_send", (PyCFunction)Cc_next_send, METH_VARARGS, "The pacer's next time."},
    {"target", (PyCFunction)Cc_target, METH_NOARGS, "The delay target (None: no sample)."},
    {"queueing_delay", (PyCFunction)Cc_queueing_delay, METH_NOARGS,
     "The least recent round trip."},
    {"queueing", (PyCFunction)Cc_queueing, METH_NOARGS, "Whether the path queues."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Cc_members[] = {
    {"limit", T_LONG, offsetof(CcObject, limit), READONLY, NULL},
    {"cwnd", T_DOUBLE, offsetof(CcObject, cwnd), 0, NULL},
    {"ssthresh", T_DOUBLE, offsetof(CcObject, ssthresh), 0, NULL},
    {"alpha", T_DOUBLE, offsetof(CcObject, alpha), 0, NULL},
    {"results", T_LONG, offsetof(CcObject, results), READONLY, NULL},
    {"marked", T_LONG, offsetof(CcObject, marked), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Cc_getset[] = {
    {"allowed", (getter)Cc_get_allowed, NULL, NULL, NULL},
    {"base_rtt", (getter)Cc_get_base_rtt, NULL, NULL, NULL},
    {"cuts", (getter)Cc_get_cuts, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CcType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ina.host._window.Congestion",
    .tp_basicsize = sizeof(CcObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The congestion window (ina.host.congestion.CongestionWindow).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Cc_init,
    .tp_methods = Cc_methods,
    .tp_members = Cc_members,
    .tp_getset = Cc_getset,
};

/* ------------------------------------------------------------------------------
 * Window: one reduction (ina.host.window.ReductionWindow).
 */
enum { ASK = 0, ASKED = 1, TOLD_TO_SEND = 2 };

typedef struct {
    double sent_at, deadline, first;
    long order;
    int tries, later;
    char active, sample, query;
} Outstanding;

typedef struct {
    PyObject_HEAD
    PyObject *plan;        /* the ChunkPlan (Python) */
    RtoObject *rto;
    CcObject *cc;
    PyObject *on_lead;     /* called with the lead's wire bytes as its result arrives */
    PyObject *result_wire; /* bytearray: the results' arrays as they came */
    PyObject *lead_payload;/* bytes */
    Py_buffer packets, owned;
    int have_packets, have_owned;
    /* the plan, as C arrays */
    long chunks, offset, slots, width, itemsize, stride;
    uint32_t seq_base;
    unsigned job_id;
    int owners;
    long *counts, *lengths;
    char *sends_data, *gets_data, *owns;
    /* what moves */
    char *held, *received;
    Outstanding *out;
    long in_flight;
    long *lost; /* a FIFO of chunks, each at most once (in_lost) */
    char *in_lost;
    long lost_head, lost_n;
    long results, completions, unexpected, marked, next, base;
    long sends, retransmissions, early_retransmissions, probes, queries, held_answers;
    double progress_at, send_at;
    int joined, queued, overflow;
} WindowObject;

static uint32_t rd32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static unsigned rd16(const unsigned char *p) { return ((unsigned)p[0] << 8) | p[1]; }

static long chunk_of(const WindowObject *w, uint32_t seq) { return (long)(uint32_t)(seq - w->seq_base); }

static uint32_t seq_of(const WindowObject *w, long chunk) { return w->seq_base + (uint32_t)chunk; }

static long at_of(const WindowObject *w, long chunk) { return (chunk - w->offset) * w->stride; }

static int in_lost(const WindowObject *w, long chunk) { return w->in_lost[chunk]; }

static void lost_push(WindowObject *w, long chunk) {
    w->lost[(w->lost_head + w->lost_n) % w->chunks] = chunk;
    w->lost_n++;
    w->in_lost[chunk] = 1;
}

static long lost_pop(WindowObject *w) {
    long chunk = w->lost[w->lost_head];
    w->lost_head = (w->lost_head + 1) % w->chunks;
    w->lost_n--;
    w->in_lost[chunk] = 0;
    return chunk;
}

static Outstanding *outstanding(WindowObject *w, long chunk) {
    return chunk >= 0 && chunk < w->chunks && w->out[chunk].active ? &w->out[chunk] : NULL;
}

static int room(const WindowObject *w) {
    return w->next < w->chunks && w->next < w->base + w->slots
           && w->in_flight < cc_allowed(w->cc);
}

static int may_send_new(const WindowObject *w) { return room(w) && w->held[w->next]; }

/* Keep a chunk's values, a packet at `at` carries (a result's, an owner's), as its
 * result's: the caller checked the packet holds them. */
static void hold_values(WindowObject *w, long chunk, const unsigned char *packet) {
    long lo = (chunk - w->offset) * K.array_bytes, size = w->counts[chunk] * w->itemsize;
    memcpy(PyByteArray_AS_STRING(w->result_wire) + lo, packet + K.header_bytes, (size_t)size);
}

static int asks(const WindowObject *w, long chunk) {
    return !w->owners && chunk >= w->offset && w->sends_data[chunk];
}

static int append_bytes(PyObject *out, const void *data, Py_ssize_t n) {
    PyObject *b = PyBytes_FromStringAndSize((const char *)data, n);
    if (b == NULL)
        return -1;
    int r = PyList_Append(out, b);
    Py_DECREF(b);
    return r;
}

/* The chunk's packet: its header and its array, or the header alone with NODATA; the
 * lead's with its seq written. */
static int append_payload(WindowObject *w, long chunk, PyObject *out) {
    if (chunk < w->offset) {
        Py_ssize_t n = PyBytes_GET_SIZE(w->lead_payload);
        PyObject *b = PyBytes_FromStringAndSize(PyBytes_AS_STRING(w->lead_payload), n);
        if (b == NULL)
            return -1;
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(b) + K.off_seq;
        uint32_t s = seq_of(w, chunk);
        p[0] = (unsigned char)(s >> 24), p[1] = (unsigned char)(s >> 16);
        p[2] = (unsigned char)(s >> 8), p[3] = (unsigned char)s;
        int r = PyList_Append(out, b);
        Py_DECREF(b);
        return r;
    }
    long at = at_of(w, chunk);
    return append_bytes(out, (char *)w->packets.buf + at, w->lengths[chunk - w->offset]);
}

static int append_query(WindowObject *w, long chunk, PyObject *out) {
    unsigned char header[256];
    long at = at_of(w, chunk);
    memcpy(header, (char *)w->packets.buf + at, (size_t)K.header_bytes);
    header[K.off_flags] |= (unsigned char)K.f_query;
    return append_bytes(out, header, K.header_bytes);
}

/* Send `chunk` (again): its packet, after its owned values if they are this
 * worker's; or, sent again, its QUERY (asks) unless one is unanswered or was
 * answered SEND. A QUERY is a header: the pacer lets the values that may follow go. */
static int send_chunk(WindowObject *w, long chunk, double now, PyObject *out) {
    Outstanding *s = outstanding(w, chunk);
    if (s != NULL && s->query == ASK && asks(w, chunk)) {
        s->tries++, s->sent_at = now, s->deadline = now + rto_value(w->rto);
        s->order = w->sends, s->later = 0, s->query = ASKED;
        w->queries++;
        w->sends++;
        return append_query(w, chunk, out);
    }
    if (w->owns[chunk]) {
        long at = at_of(w, chunk);
        if (append_bytes(out, (char *)w->owned.buf + at, w->stride) < 0)
            return -1;
    }
    double deadline = now + rto_value(w->rto);
    if (w->sends == 0)
        w->progress_at = now;
    if (s == NULL) {
        s = &w->out[chunk];
        s->active = 1, s->sent_at = now, s->deadline = deadline, s->order = w->sends;
        s->sample = (char)(w->joined || w->results > 0), s->tries = 1, s->later = 0;
        s->first = now, s->query = ASK;
        w->in_flight++;
    } else {
        s->tries++, s->sent_at = now, s->deadline = deadline, s->order = w->sends;
        s->later = 0, s->query = ASK;
        w->retransmissions++;
    }
    w->sends++;
    w->send_at = cc_next_send(w->cc, w->send_at, now, w->rto->has_srtt, w->rto->srtt);
    return append_payload(w, chunk, out);
}

/* Queue `chunk` to be sent again if results of later sends overtook it `overtaken`
 * times or more; 1 if it was queued now. No copy sooner than the least RTO after
 * the last: results of a call's first rounds overtake each other by a few
 * milliseconds (a round waits for its slowest worker), and with a least RTO of
 * seconds nothing at all is sent twice. */
static int found_lost(WindowObject *w, long chunk, Outstanding *s, int overtaken, double now) {
    if (s->later >= overtaken && !in_lost(w, chunk) && now - s->sent_at >= w->rto->floor) {
        lost_push(w, chunk);
        return 1;
    }
    return 0;
}

/* The oldest chunk timed out: every other one that a result of a later send
 * overtook is lost too, and goes next (as after TCP's RTO, what the SACKs show
 * missing, RFC 6675). Without this a burst that lost many chunks recovered one per
 * RTO: 11 lost of 16, 11 RTOs (110 s at a least RTO of 10 s). So does every other
 * one last sent an RTO ago or more, which nothing overtook: its QUERY goes (a
 * header; its values only if the node lacks them). Without it, a chunk whose
 * contribution was lost while an older one of this worker was recovered was never
 * sent again (nothing later can complete without it, so nothing overtakes it), and
 * every other worker waited for it, HELD, until this worker's older chunk came
 * back: up to 100 s on the fat-tree at 10% loss. */
static void lost_at_timeout(WindowObject *w, double now) {
    double stale = now - rto_value(w->rto);
    for (long c = w->base; c < w->next; c++) {
        Outstanding *s = outstanding(w, c);
        if (s != NULL && !found_lost(w, c, s, 1, now) && c != w->base && s->sent_at <= stale
            && !in_lost(w, c))
            lost_push(w, c);
    }
}

/* When the window can take no new chunk (it is full, the congestion window is, or
 * the array is all sent), when to send the oldest again without waiting for its
 * RTO: a probe interval after its last send or the last progress, whichever is
 * later (0: none). Not while the windows have room and the next chunk waits for its
 * owner's values: it goes once they come, and its result reveals a loss before it;
 * the oldest's own result waits for the slowest worker's copy, which no probe
 * speeds up. (Probing there sent 375 to 547 copies of every owned Allgather's 409
 * chunks, NODATA and values, on the fat-tree at 2 Mbit/s, where a few are lost.)
 * Each probe of the same chunk waits twice as long as the one before (up to
 * MAX_PROBE_DOUBLINGS): its result usually waits for another worker's recovery,
 * which more copies of this one do not speed up. */
static int probe_at(WindowObject *w, double *at) {
    Outstanding *oldest = outstanding(w, w->base);
    double probe;
    if (oldest == NULL || !rto_probe(w->rto, w->queued, &probe) || room(w))
        return 0;
    long d = oldest->tries - 1 < K.max_probe_doublings ? oldest->tries - 1 : K.max_probe_doublings;
    double since = w->progress_at > oldest->sent_at ? w->progress_at : oldest->sent_at;
    *at = since + probe * (double)(1L << d);
    return 1;
}

/* Retransmissions that are due (early ones first), then the new chunks the windows
 * allow, as many as the pacer lets go now. Only the oldest outstanding chunk can
 * time out, as in TCP: a window sent in one burst waits in queues, and its later
 * packets must not all be sent again when the first is slow; losses among them are
 * found by the results that overtake them. The windows do not move while sending
 * (only results and timeouts move them). */
static PyObject *packets_to_send(WindowObject *w, double now) {
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    while (w->lost_n > 0 && now >= w->send_at) {
        long chunk = lost_pop(w);
        if (outstanding(w, chunk) != NULL) {
            w->early_retransmissions++;
            if (send_chunk(w, chunk, now, out) < 0)
                goto fail;
        }
    }
    if (now < w->send_at)
        return out;
    Outstanding *oldest = outstanding(w, w->base);
    double at;
    if (oldest != NULL && oldest->deadline <= now) {
        if (oldest->sample)
            cc_on_timeout(w->cc, now, w->rto->has_srtt, w->rto->srtt, now - w->progress_at);
        rto_timed_out(w->rto, now);
        if (send_chunk(w, w->base, now, out) < 0)
            goto fail;
        lost_at_timeout(w, now);
    } else if (oldest != NULL && probe_at(w, &at) && at <= now) {
        /* Nothing in flight after it can reveal its loss (the window is full, or
         * the array's tail): send it again without waiting for the RTO. */
        w->early_retransmissions++;
        w->probes++;
        if (send_chunk(w, w->base, now, out) < 0)
            goto fail;
    }
    long end = w->base + w->slots < w->chunks ? w->base + w->slots : w->chunks;
    long allowed = cc_allowed(w->cc);
    while (w->next < end && w->in_flight < allowed && now >= w->send_at && w->held[w->next]) {
        if (send_chunk(w, w->next, now, out) < 0)
            goto fail;
        w->next++;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* A result of the send `order` arrived: each chunk sent before it and still missing
 * has one more later result; at DUPLICATE_RESULTS, it is lost. */
static void overtaken(WindowObject *w, long order, double now) {
    for (long c = w->base; c < w->next; c++) {
        Outstanding *s = outstanding(w, c);
        if (s != NULL && s->order < order) {
            s->later++;
            if (found_lost(w, c, s, (int)K.duplicate_results, now))
                cc_on_loss(w->cc, now, w->rto->has_srtt, w->rto->srtt);
        }
    }
}

/* Keep what a result brings: 1 if it ends the chunk, 0 if not, -1 on an error (the
 * lead's check raised). */
static int take(WindowObject *w, long chunk, long flags, const unsigned char *p, Py_ssize_t len) {
    if (flags & K.f_nodata) {
        if (w->gets_data[chunk]) {
            w->unexpected++;
            log_msg(LOG_DEBUG, "completion of seq %lu, whose data is ours: ignored",
                    (unsigned long)seq_of(w, chunk));
            return 0;
        }
        w->completions++;
        return 1;
    }
    long width = chunk < w->offset ? K.width32 : w->width;
    if (len < K.header_bytes + K.array_bytes || p[K.off_width] != width) {
        log_msg(LOG_WARNING, "result for seq %lu is not a whole array of width %ld",
                (unsigned long)seq_of(w, chunk), width);
        return 0;
    }
    if (chunk < w->offset) {
        PyObject *r = PyObject_CallFunction(w->on_lead, "y#", p + K.header_bytes,
                                            (Py_ssize_t)(w->counts[chunk] * 4));
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    } else if (w->gets_data[chunk]) {
        hold_values(w, chunk, p);
        w->overflow |= (flags & K.f_overflow) != 0;
    }
    return 1;
}

/* A received payload: 1 if it was a new result of this window, 0 if not, -1 on an
 * error. An owner's values are held (hold). */
static int hold_payload(WindowObject *w, const unsigned char *p, Py_ssize_t len);

static int accept_payload(WindowObject *w, const unsigned char *p, Py_ssize_t len, double now) {
    if (len < K.header_bytes)
        return 0;
    long flags = p[1];
    unsigned job = rd16(p + 2), count = rd16(p + K.off_count);
    uint32_t seq = rd32(p + K.off_seq);
    if (job != w->job_id || !(flags & K.f_result))
        return 0;
    if ((p[0] & 0xF) == K.op_copy) {
        if (hold_payload(w, p, len) < 0)
            return -1;
        return 0;
    }
    long chunk = chunk_of(w, seq);
    if (chunk >= w->next || w->received[chunk])
        return 0;
    long n = w->counts[chunk];
    if ((long)count != n) {
        log_msg(LOG_WARNING, "result for seq %lu carries %u values, expected %ld",
                (unsigned long)seq, count, n);
        return 0;
    }
    int took = take(w, chunk, flags, p, len);
    if (took <= 0)
        return took;
    w->received[chunk] = 1;
    w->results++;
    int marked = (p[K.off_ecn] & K.ecn_ce) != 0;
    w->marked += marked;
    w->queued = marked;
    long first = -1;
    for (long c = w->base; c < w->next; c++)
        if (w->out[c].active) {
            first = c;
            break;
        }
    Outstanding *s = outstanding(w, chunk);
    int has_rtt = 0;
    double rtt = 0.0;
    /* Sent once: the result answers that send (Karn). Then it overtakes whatever
     * was sent before it and is still missing; and its round trip measures the path
     * if every worker had joined when it was sent and no result of a later send
     * overtook it (it waited for another worker's loss recovery: under 5% loss per
     * link such round trips made the RTO, the probe and the delay target grow with
     * the losses, which then took longer to recover: a fifth of the lossless rate).
     * A chunk sent more than once overtakes nothing: its result may answer an
     * earlier send that waited in a queue. (Taking a result a least round trip after
     * the last send as its answer, as RACK does, was tried: on the fat-tree with
     * links unlimited, CPU-bound queues made it send hundreds of copies a call where
     * 2 to 9 are lost.) */
    if (s != NULL) {
        s->active = 0;
        w->in_flight--;
        if (s->tries == 1) {
            if (s->sample && s->later == 0) {
                has_rtt = 1;
                rtt = now - s->sent_at;
                rto_sample(w->rto, rtt);
            }
            if (chunk != first) /* else every other one was sent after it */
                overtaken(w, s->order, now);
        } else if (s->sample) {
            rto_bound(w->rto, now - s->first);
        }
    }
    cc_on_result(w->cc, now, marked, has_rtt, rtt, w->rto->has_srtt, w->rto->srtt);
    w->progress_at = now;
    w->rto->backoff = 0;
    /* Progress: the new oldest gets a full RTO from now (RFC 6298 5.3), as it may
     * have waited in queues behind the ones just answered. */
    if (chunk == w->base) {
        while (w->base < w->chunks && w->received[w->base])
            w->base++;
        Outstanding *oldest = outstanding(w, w->base);
        if (oldest != NULL) {
            double d = now + rto_value(w->rto);
            if (d > oldest->deadline)
                oldest->deadline = d;
        }
    }
    return 1;
}

/* An owner's values: -1 on an error, 0 if of no chunk of this window, 1 if of one. */
static int hold_payload(WindowObject *w, const unsigned char *p, Py_ssize_t len) {
    if (len < K.header_bytes || !w->owners)
        return 0;
    long flags = p[1];
    unsigned job = rd16(p + 2), count = rd16(p + K.off_count);
    uint32_t seq = rd32(p + K.off_seq);
    long chunk = chunk_of(w, seq);
    if (job != w->job_id || !(flags & K.f_result) || chunk >= w->chunks)
        return 0;
    if (w->held[chunk])
        return 1; /* a copy */
    if (chunk < w->offset || (long)count != w->counts[chunk] || p[K.off_width] != K.width32
        || len < K.header_bytes + K.array_bytes) {
        log_msg(LOG_WARNING, "an owner's values for seq %lu are not a whole array of %ld values",
                (unsigned long)seq, w->counts[chunk]);
        return 1;
    }
    hold_values(w, chunk, p);
    w->held[chunk] = 1;
    /* The copy met a congested queue on its way here: the chunk's NODATA carries the
     * mark into its round, whose completion then tells every worker, its owner too,
     * as a result carries its contributions' marks (and TCP's ECE a CE). Else no
     * owner learns of the queues its copies meet: nothing answers a copy itself. */
    if (p[K.off_ecn] & K.ecn_ce) {
        unsigned char *q = (unsigned char *)w->packets.buf + at_of(w, chunk) + K.off_ecn;
        *q |= (unsigned char)K.ecn_ce;
    }
    return 1;
}

/* The answer to a QUERY of this window's (QUERY | REPLY, the verdict in count):
 * HELD, the chunk waits a full RTO more from now; SEND, its values go next. 1 if it
 * was one (answering an unanswered QUERY or not). */
static int answer_payload(WindowObject *w, const unsigned char *p, Py_ssize_t len, double now) {
    if (len < K.header_bytes)
        return 0;
    long flags = p[1];
    unsigned job = rd16(p + 2), verdict = rd16(p + K.off_count);
    uint32_t seq = rd32(p + K.off_seq);
    long both = K.f_query | K.f_reply;
    if (job != w->job_id || (flags & both) != both || (flags & K.f_not_answer))
        return 0;
    long chunk = chunk_of(w, seq);
    Outstanding *s = chunk < w->next ? outstanding(w, chunk) : NULL;
    if (s == NULL || s->query != ASKED)
        return 1; /* late */
    if ((long)verdict == K.held_verdict) {
        w->held_answers++;
        s->query = ASK, s->sent_at = now, s->order = w->sends, s->later = 0;
        double d = now + rto_value(w->rto);
        if (d > s->deadline)
            s->deadline = d;
    } else {
        s->query = TOLD_TO_SEND;
        if (!in_lost(w, chunk))
            lost_push(w, chunk);
    }
    return 1;
}

/* --- the Python face of Window ---------------------------------------------- */

static void *alloc_zero(long n, size_t size) {
    void *p = PyMem_Calloc((size_t)(n > 0 ? n : 1), size);
    if (p == NULL)
        PyErr_NoMemory();
    return p;
}

/* A plan's attribute as a long. */
static int plan_long(PyObject *plan, const char *name, long *v) {
    PyObject *o = PyObject_GetAttrString(plan, name);
    if (o == NULL)
        return -1;
    *v = PyLong_AsLong(o);
    Py_DECREF(o);
    return (*v == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* A plan's per-chunk sequence (list of ints or bools, or bytes) into `n` entries. */
static int plan_longs(PyObject *plan, const char *name, long n, long *into, char *flags) {
    PyObject *o = PyObject_GetAttrString(plan, name);
    if (o == NULL)
        return -1;
    PyObject *seq = PySequence_Fast(o, "a plan's per-chunk field must be a sequence");
    Py_DECREF(o);
    if (seq == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "the plan's %s has %zd entries, not %ld", name,
                     PySequence_Fast_GET_SIZE(seq), n);
        Py_DECREF(seq);
        return -1;
    }
    for (long i = 0; i < n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (into)
            into[i] = v;
        else
            flags[i] = (char)(v != 0);
    }
    Py_DECREF(seq);
    return 0;
}

static int plan_buffer(PyObject *plan, const char *name, Py_buffer *view, int writable) {
    PyObject *o = PyObject_GetAttrString(plan, name);
    if (o == NULL)
        return -1;
    int r = PyObject_GetBuffer(o, view, writable ? PyBUF_WRITABLE | PyBUF_SIMPLE : PyBUF_SIMPLE);
    Py_DECREF(o);
    return r;
}

static int Window_init(WindowObject *w, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"plan", "rto", "cc", "joined", "on_lead", NULL};
    PyObject *plan, *on_lead;
    RtoObject *rto;
    CcObject *cc;
    int joined;
    if (check_configured(1) < 0)
        return -1;
    if (w->plan != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a window is initialised once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!O!pO", kw, &plan, &RtoType, &rto,
                                     &CcType, &cc, &joined, &on_lead))
        return -1;
    w->plan = Py_NewRef(plan);
    w->rto = (RtoObject *)Py_NewRef(rto);
    w->cc = (CcObject *)Py_NewRef(cc);
    w->on_lead = Py_NewRef(on_lead);
    w->joined = joined;
    long job, seq_base, per_packet, owners;
    if (plan_long(plan, "chunks", &w->chunks) < 0 || plan_long(plan, "offset", &w->offset) < 0
        || plan_long(plan, "width", &w->width) < 0 || plan_long(plan, "stride", &w->stride) < 0
        || plan_long(plan, "job_id", &job) < 0 || plan_long(plan, "seq_base", &seq_base) < 0
        || plan_long(plan, "per_packet", &per_packet) < 0 || plan_long(plan, "owners", &owners) < 0)
        return -1;
    w->owners = owners != 0;
    PyObject *config = PyObject_GetAttrString(plan, "config");
    if (config == NULL)
        return -1;
    int bad = plan_long(config, "window", &w->slots);
    Py_DECREF(config);
    if (bad < 0)
        return -1;
    if (w->chunks < 0 || w->offset < 0 || w->offset > 1 || w->offset > w->chunks
        || w->slots < 1 || per_packet < 1 || w->stride != K.header_bytes + K.array_bytes) {
        PyErr_SetString(PyExc_ValueError, "a window's plan is inconsistent");
        return -1;
    }
    w->job_id = (unsigned)job;
    w->seq_base = (uint32_t)seq_base;
    w->itemsize = K.array_bytes / per_packet;
    long n = w->chunks, array_chunks = n - w->offset;
    if (!(w->counts = alloc_zero(n, sizeof(long))) || !(w->lengths = alloc_zero(n, sizeof(long)))
        || !(w->sends_data = alloc_zero(n, 1)) || !(w->gets_data = alloc_zero(n, 1))
        || !(w->owns = alloc_zero(n, 1)) || !(w->held = alloc_zero(n, 1))
        || !(w->received = alloc_zero(n, 1)) || !(w->out = alloc_zero(n, sizeof(Outstanding)))
        || !(w->lost = alloc_zero(n, sizeof(long))) || !(w->in_lost = alloc_zero(n, 1)))
        return -1;
    if (plan_longs(plan, "counts", n, w->counts, NULL) < 0
        || plan_longs(plan, "lengths", array_chunks, w->lengths, NULL) < 0
        || plan_longs(plan, "sends_data", n, NULL, w->sends_data) < 0
        || plan_longs(plan, "gets_data", n, NULL, w->gets_data) < 0
        || plan_longs(plan, "held", n, NULL, w->held) < 0
        || plan_longs(plan, "owns", n, NULL, w->owns) < 0)
        return -1;
    for (long c = 0; c < n; c++) {
        long most = c < w->offset ? K.max_lead : per_packet;
        if (w->counts[c] < 0 || w->counts[c] > most) {
            PyErr_SetString(PyExc_ValueError, "a chunk's count is beyond its packet");
            return -1;
        }
    }
    if (plan_buffer(plan, "packets", &w->packets, 1) < 0)
        return -1;
    w->have_packets = 1;
    if (plan_buffer(plan, "owned_payloads", &w->owned, 0) < 0)
        return -1;
    w->have_owned = 1;
    if (w->packets.len < array_chunks * w->stride) {
        PyErr_SetString(PyExc_ValueError, "the plan's packets are shorter than its chunks");
        return -1;
    }
    for (long c = w->offset; c < n; c++) {
        if (w->lengths[c - w->offset] < K.header_bytes || w->lengths[c - w->offset] > w->stride
            || (w->owns[c] && w->owned.len < at_of(w, c) + w->stride)) {
            PyErr_SetString(PyExc_ValueError, "a chunk's packet is beyond the plan's buffers");
            return -1;
        }
    }
    w->lead_payload = PyObject_GetAttrString(plan, "lead_payload");
    if (w->lead_payload == NULL)
        return -1;
    if (!PyBytes_Check(w->lead_payload)
        || (w->offset && PyBytes_GET_SIZE(w->lead_payload) < K.off_seq + 4)) {
        PyErr_SetString(PyExc_ValueError, "the plan's lead payload is not a lead's packet");
        return -1;
    }
    w->result_wire = PyByteArray_FromStringAndSize(NULL, array_chunks * K.array_bytes);
    if (w->result_wire == NULL)
        return -1;
    memset(PyByteArray_AS_STRING(w->result_wire), 0, (size_t)(array_chunks * K.array_bytes));
    for (long c = w->offset; c < n; c++)
        if (w->owns[c])
            hold_values(w, c, (unsigned char *)w->owned.buf + at_of(w, c));
    w->send_at = -INFINITY;
    return 0;
}

static int Window_traverse(WindowObject *w, visitproc visit, void *arg) {
    Py_VISIT(w->plan);
    Py_VISIT(w->rto);
    Py_VISIT(w->cc);
    Py_VISIT(w->on_lead);
    return 0;
}

static int Window_clear(WindowObject *w) {
    if (w->have_packets)
        PyBuffer_Release(&w->packets);
    if (w->have_owned)
        PyBuffer_Release(&w->owned);
    w->have_packets = w->have_owned = 0;
    Py_CLEAR(w->plan);
    Py_CLEAR(w->rto);
    Py_CLEAR(w->cc);
    Py_CLEAR(w->on_lead);
    Py_CLEAR(w->result_wire);
    Py_CLEAR(w->lead_payload);
    return 0;
}

static void Window_dealloc(WindowObject *w) {
    PyObject_GC_UnTrack(w);
    Window_clear(w);
    PyMem_Free(w->counts);
    PyMem_Free(w->lengths);
    PyMem_Free(w->sends_data);
    PyMem_Free(w->gets_data);
    PyMem_Free(w->owns);
    PyMem_Free(w->held);
    PyMem_Free(w->received);
    PyMem_Free(w->out);
    PyMem_Free(w->lost);
    PyMem_Free(w->in_lost);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static int ready(WindowObject *w) {
    if (w->out == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the window was not initialised");
        return -1;
    }
    return 0;
}

static PyObject *Window_packets_to_send(WindowObject *w, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"now", NULL};
    double now = 0.0;
    if (ready(w) < 0 || !PyArg_ParseTupleAndKeywords(args, kwargs, "|d", kw, &now))
        return NULL;
    return packets_to_send(w, now);
}

typedef int (*PayloadFn)(WindowObject *, const unsigned char *, Py_ssize_t, double);

static PyObject *with_payload(WindowObject *w, PyObject *args, PyObject *kwargs, PayloadFn fn) {
    static char *kw[] = {"payload", "now", NULL};
    Py_buffer b;
    double now = 0.0;
    if (ready(w) < 0 || !PyArg_ParseTupleAndKeywords(args, kwargs, "y*|d", kw, &b, &now))
        return NULL;
    int r = fn(w, (const unsigned char *)b.buf, b.len, now);
    PyBuffer_Release(&b);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

static PyObject *Window_accept(WindowObject *w, PyObject *args, PyObject *kwargs) {
    return with_payload(w, args, kwargs, accept_payload);
}

static PyObject *Window_answer(WindowObject *w, PyObject *args, PyObject *kwargs) {
    return with_payload(w, args, kwargs, answer_payload);
}

static int hold_now(WindowObject *w, const unsigned char *p, Py_ssize_t len, double now) {
    (void)now;
    return hold_payload(w, p, len);
}

static PyObject *Window_hold(WindowObject *w, PyObject *args, PyObject *kwargs) {
    return with_payload(w, args, kwargs, hold_now);
}

static PyObject *Window_next_timer(WindowObject *w, PyObject *unused) {
    (void)unused;
    if (ready(w) < 0)
        return NULL;
    if (w->lost_n > 0 || may_send_new(w))
        return PyFloat_FromDouble(w->send_at > 0.0 ? w->send_at : 0.0);
    Outstanding *oldest = outstanding(w, w->base);
    if (oldest == NULL)
        Py_RETURN_NONE;
    double probe, due = oldest->deadline;
    if (probe_at(w, &probe) && probe < due)
        due = probe;
    return PyFloat_FromDouble(due > w->send_at ? due : w->send_at);
}

static PyObject *Window_probe_at(WindowObject *w, PyObject *unused) {
    (void)unused;
    double at;
    if (ready(w) < 0)
        return NULL;
    if (!probe_at(w, &at))
        Py_RETURN_NONE;
    return PyFloat_FromDouble(at);
}

static PyObject *Window_missing(WindowObject *w, PyObject *unused) {
    (void)unused;
    if (ready(w) < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    for (long c = 0; out != NULL && c < w->chunks; c++) {
        if (w->received[c])
            continue;
        PyObject *s = PyLong_FromUnsignedLong(seq_of(w, c));
        if (s == NULL || PyList_Append(out, s) < 0)
            Py_CLEAR(out);
        Py_XDECREF(s);
    }
    return out;
}

static PyObject *Window_sent_at(WindowObject *w, PyObject *arg) {
    long chunk = PyLong_AsLong(arg);
    if (chunk == -1 && PyErr_Occurred())
        return NULL;
    Outstanding *s = ready(w) < 0 ? NULL : outstanding(w, chunk);
    if (s == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_KeyError, "chunk %ld is not outstanding", chunk);
        return NULL;
    }
    return PyFloat_FromDouble(s->sent_at);
}

static PyObject *Window_get_lost(WindowObject *w, void *c) {
    (void)c;
    PyObject *out = PyList_New(w->lost_n);
    for (long i = 0; out != NULL && i < w->lost_n; i++) {
        PyObject *v = PyLong_FromLong(w->lost[(w->lost_head + i) % w->chunks]);
        if (v == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, v);
    }
    return out;
}

static PyObject *Window_get_received(WindowObject *w, void *c) {
    (void)c;
    return PyBytes_FromStringAndSize(w->received, w->chunks);
}

static PyObject *Window_get_done(WindowObject *w, void *c) {
    (void)c;
    return PyBool_FromLong(w->results == w->chunks);
}

static PyObject *Window_get_obj(WindowObject *w, void *c) {
    PyObject *o = *(PyObject **)((char *)w + (size_t)c);
    if (o == NULL)
        Py_RETURN_NONE;
    return Py_NewRef(o);
}

static PyMethodDef Window_methods[] = {
    {"packets_to_send", (PyCFunction)(void (*)(void))Window_packets_to_send,
     METH_VARARGS | METH_KEYWORDS, "What is due to be sent now."},
    {"accept", (PyCFunction)(void (*)(void))Window_accept, METH_VARARGS | METH_KEYWORDS,
     "Take a received payload: True if a new result of this window."},
    {"answer", (PyCFunction)(void (*)(void))Window_answer, METH_VARARGS | METH_KEYWORDS,
     "Take a QUERY's answer: True if it was one."},
    {"hold", (PyCFunction)(void (*)(void))Window_hold, METH_VARARGS | METH_KEYWORDS,
     "Take an owner's values: False if of no chunk of this window."},
    {"next_timer", (PyCFunction)Window_next_timer, METH_NOARGS, "When something is next due."},
    {"probe_at", (PyCFunction)Window_probe_at, METH_NOARGS, "When the oldest is probed."},
    {"missing", (PyCFunction)Window_missing, METH_NOARGS, "The seqs without a result."},
    {"sent_at", (PyCFunction)Window_sent_at, METH_O, "An outstanding chunk's last send."},
    {NULL, NULL, 0, NULL},
};

#define WMEMBER(name, type) {#name, type, offsetof(WindowObject, name), READONLY, NULL}
static PyMemberDef Window_members[] = {
    WMEMBER(results, T_LONG), WMEMBER(completions, T_LONG), WMEMBER(unexpected, T_LONG),
    WMEMBER(marked, T_LONG), WMEMBER(next, T_LONG), WMEMBER(base, T_LONG),
    WMEMBER(sends, T_LONG), WMEMBER(retransmissions, T_LONG),
    WMEMBER(early_retransmissions, T_LONG), WMEMBER(probes, T_LONG), WMEMBER(queries, T_LONG),
    WMEMBER(held_answers, T_LONG), WMEMBER(in_flight, T_LONG), WMEMBER(progress_at, T_DOUBLE),
    WMEMBER(send_at, T_DOUBLE), WMEMBER(queued, T_BOOL), WMEMBER(overflow, T_BOOL),
    WMEMBER(joined, T_BOOL),
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Window_getset[] = {
    {"plan", (getter)Window_get_obj, NULL, NULL, (void *)offsetof(WindowObject, plan)},
    {"rto", (getter)Window_get_obj, NULL, NULL, (void *)offsetof(WindowObject, rto)},
    {"cc", (getter)Window_get_obj, NULL, NULL, (void *)offsetof(WindowObject, cc)},
    {"result_wire", (getter)Window_get_obj, NULL, NULL,
     (void *)offsetof(WindowObject, result_wire)},
    {"lost", (getter)Window_get_lost, NULL, NULL, NULL},
    {"received", (getter)Window_get_received, NULL, NULL, NULL},
    {"done", (getter)Window_get_done, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject WindowType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ina.host._window.Window",
    .tp_basicsize = sizeof(WindowObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One reduction's window (ina.host.window.ReductionWindow).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Window_init,
    .tp_dealloc = (destructor)Window_dealloc,
    .tp_traverse = (traverseproc)Window_traverse,
    .tp_clear = (inquiry)Window_clear,
    .tp_methods = Window_methods,
    .tp_members = Window_members,
    .tp_getset = Window_getset,
};

/* ------------------------------------------------------------------------------ */

static PyMethodDef module_methods[] = {
    {"configure_window", (PyCFunction)(void (*)(void))configure_window,
     METH_VARARGS | METH_KEYWORDS, "The window's constants (ina.host.window sets them)."},
    {"configure_congestion", (PyCFunction)(void (*)(void))configure_congestion,
     METH_VARARGS | METH_KEYWORDS, "The congestion controller's (ina.host.congestion)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ina.host._window",
    "The worker's per-packet path, compiled (see ina.host.window).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__window(void) {
    PyTypeObject *types[] = {&RtoType, &CcType, &WindowType};
    const char *names[] = {"Rto", "Congestion", "Window"};
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    for (int i = 0; i < 3; i++) {
        if (PyType_Ready(types[i]) < 0 || PyModule_AddObjectRef(m, names[i],
                                                                (PyObject *)types[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
