/* A control for issue 41's scaling goal (benchmarks/scaling_control.py builds and runs
 * it): the smallest discrete-event simulation of the scaling run's shape, written in C
 * the way fast simulators are written (events as plain structs in one array-backed
 * heap, requests as 64-byte structs from a free list, no allocation per event), so that
 * its speed per request from 10 to 1,000 GPUs says what a compiled simulator keeps when
 * the state in flight grows a hundredfold. It is not hetserve's model: one stage per
 * model, a batch of what is queued (up to MAX_BATCH) on any idle GPU of the model's ten,
 * a batch taking BATCH_S + ROW_S * rows, Poisson arrivals at RATE_PER_GPU requests/s a
 * GPU (the scaling run's 100), a deadline SLO_S after arrival.
 *
 * QUEUE (optional) chooses the event queue: "heap" (the default: a binary heap, as most
 * simulators keep their events) or "calendar" (Brown's calendar queue, CACM 31(10), 1988:
 * buckets of a fixed width in a ring, each a sorted list, walked in time order; constant
 * work an event where the buckets hold about one event each, which the width is chosen
 * for), so that what the heap's depth costs can be told from what the state in flight
 * costs. Both give the same run where no two events share a time.
 *
 * Usage: scaling_control GPUS REQUESTS SEED [heap|calendar]
 * Prints one line: gpus requests seconds ns_per_request served met_slo mean_in_flight
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>

#define GPUS_PER_MODEL 10
#define RATE_PER_GPU 100.0
#define BATCH_S 0.020
#define ROW_S 0.002
#define MAX_BATCH 8
#define SLO_S 0.150

typedef struct Req {
    double arrival_s, deadline_s, start_s, finish_s;
    int64_t id;
    int32_t model, gpu;
    struct Req *next;
    int64_t pad; /* (64 bytes: a cache line each) */
} Req;

/* kind 0: model who's next arrival; 1: GPU who's batch done */
typedef struct { double t; int32_t kind, who; } Ev;
typedef struct { Req *head, *tail; int32_t n, gpu0; } Model;
typedef struct { Req *batch; int32_t rows, busy; } Gpu;

static Ev *heap;
static int64_t heap_n;
static uint64_t rng;

static double uniform(void) { /* xorshift64*, in (0, 1) */
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return ((rng * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0) + 1e-300;
}

static void heap_push(double t, int32_t kind, int32_t who) {
    int64_t i = heap_n++;
    while (i > 0) {
        int64_t p = (i - 1) >> 1;
        if (heap[p].t <= t) break;
        heap[i] = heap[p];
        i = p;
    }
    heap[i].t = t; heap[i].kind = kind; heap[i].who = who;
}

static Ev heap_pop(void) {
    Ev top = heap[0], last = heap[--heap_n];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= heap_n) break;
        if (c + 1 < heap_n && heap[c + 1].t < heap[c].t) c++;
        if (last.t <= heap[c].t) break;
        heap[i] = heap[c];
        i = c;
    }
    heap[i] = last;
    return top;
}

/* the calendar queue: bucket (vb & mask) holds, sorted by time, the events whose
 * "virtual bucket" vb = floor(t / width) is congruent; the walk takes the current
 * bucket's head where its vb is the current one, else moves to the next bucket */
typedef struct Node { double t; int32_t kind, who; struct Node *next; } Node;
static Node **buckets, *node_free;
static int64_t mask, vb_now;
static double inv_width;
static int calendar;

static void cal_push(double t, int32_t kind, int32_t who) {
    Node *e = node_free;
    if (e) node_free = e->next; else e = malloc(sizeof *e);
    e->t = t; e->kind = kind; e->who = who;
    Node **p = &buckets[(int64_t)(t * inv_width) & mask];
    while (*p && (*p)->t <= t) p = &(*p)->next; /* (after equal times: in order of push) */
    e->next = *p;
    *p = e;
}

static Ev cal_pop(void) {
    for (;;) {
        Node **b = &buckets[vb_now & mask], *e = *b;
        if (e && (int64_t)(e->t * inv_width) <= vb_now) {
            *b = e->next;
            Ev ev = {e->t, e->kind, e->who};
            e->next = node_free;
            node_free = e;
            return ev;
        }
        vb_now++;
    }
}

static void push(double t, int32_t kind, int32_t who) {
    if (calendar) cal_push(t, kind, who); else heap_push(t, kind, who);
}

static Ev pop(void) { return calendar ? cal_pop() : heap_pop(); }

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[4], "calendar") == 0) calendar = 1;
    else if (argc == 5 && strcmp(argv[4], "heap") != 0) argc = 0;
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: scaling_control GPUS REQUESTS SEED [heap|calendar]\n");
        return 2;
    }
    int32_t gpus = atoi(argv[1]);
    int64_t requests = atoll(argv[2]);
    rng = (uint64_t)atoll(argv[3]) * 0x9E3779B97F4A7C15ULL + 1;
    if (gpus < GPUS_PER_MODEL || gpus % GPUS_PER_MODEL || requests < 1) {
        fprintf(stderr, "scaling_control: GPUS a multiple of %d, REQUESTS at least 1\n",
                GPUS_PER_MODEL);
        return 2;
    }
    int32_t models = gpus / GPUS_PER_MODEL;
    double rate = RATE_PER_GPU * GPUS_PER_MODEL; /* a model's arrivals a second */
    Model *ms = calloc(models, sizeof *ms);
    Gpu *gs = calloc(gpus, sizeof *gs);
    heap = malloc((size_t)(models + gpus + 1) * sizeof *heap);
    /* about one event a bucket: arrivals at RATE_PER_GPU a GPU and about as many batch
     * ends as 0.4 of them; the ring spans at least 64 ms, more than a batch's longest
     * time (an arrival further off waits in its bucket for its round) */
    double width = 1.0 / (1.4 * RATE_PER_GPU * gpus);
    int64_t nb = 16;
    while (nb * width < 0.064) nb <<= 1;
    mask = nb - 1;
    inv_width = 1.0 / width;
    buckets = calloc((size_t)nb, sizeof *buckets);
    Req *free_list = NULL;
    int64_t arrived = 0, served = 0, met = 0;
    double in_flight_s = 0.0, now = 0.0;
    for (int32_t m = 0; m < models; m++) {
        ms[m].gpu0 = m * GPUS_PER_MODEL;
        push(-log(uniform()) / rate, 0, m);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (served < requests) {
        Ev ev = pop();
        now = ev.t;
        int32_t m;
        if (ev.kind == 0) {
            m = ev.who;
            Req *r = free_list;
            if (r) free_list = r->next; else r = malloc(sizeof *r);
            r->arrival_s = now; r->deadline_s = now + SLO_S; r->id = arrived++;
            r->model = m; r->gpu = -1; r->next = NULL;
            if (ms[m].tail) ms[m].tail->next = r; else ms[m].head = r;
            ms[m].tail = r; ms[m].n++;
            push(now - log(uniform()) / rate, 0, m);
        } else {
            Gpu *g = &gs[ev.who];
            for (Req *r = g->batch, *nx; r; r = nx) {
                nx = r->next;
                r->finish_s = now;
                served++;
                met += now <= r->deadline_s;
                in_flight_s += now - r->arrival_s;
                r->next = free_list; free_list = r;
            }
            g->batch = NULL; g->busy = 0;
            m = ev.who / GPUS_PER_MODEL;
        }
        Model *q = &ms[m];
        for (int32_t k = 0; k < GPUS_PER_MODEL && q->n > 0; k++) {
            Gpu *g = &gs[q->gpu0 + k];
            if (g->busy) continue;
            int32_t rows = q->n < MAX_BATCH ? q->n : MAX_BATCH;
            Req *first = q->head, *r = first;
            for (int32_t i = 0; i < rows; i++) {
                r->start_s = now; r->gpu = q->gpu0 + k;
                if (i == rows - 1) { q->head = r->next; r->next = NULL; } else r = r->next;
            }
            if (!q->head) q->tail = NULL;
            q->n -= rows;
            g->batch = first; g->rows = rows; g->busy = 1;
            push(now + BATCH_S + ROW_S * rows, 1, q->gpu0 + k);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    printf("%d %lld %.6f %.2f %lld %lld %.1f\n", gpus, (long long)requests, secs,
           1e9 * secs / (double)served, (long long)served, (long long)met, in_flight_s / now);
    return 0;
}
