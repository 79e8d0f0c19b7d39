/* The host benchmark's C loop (ina.bench.host): the machine's limit beside the worker.
 *
 *   hostloop reflect ADDRESS PORT GAP_US
 *       Answer every INA packet sent to ADDRESS:PORT as a root would (REPLY to a SYNC,
 *       RESULT to a contribution: the flags byte is the payload's second), in batches
 *       of up to BATCH (recvmmsg, sendmmsg); with GAP_US > 0, one at a time at least
 *       GAP_US microseconds apart, as a CPU-bound switch answers. Says "ready" once
 *       bound; runs until killed.
 *   hostloop worker ADDRESS PORT PACKETS SIZE INFLIGHT
 *       A worker with nothing but its socket calls: INFLIGHT packets of SIZE bytes in
 *       flight to ADDRESS:PORT, each result received (recvmmsg, up to BATCH at once)
 *       copied out into a result array and answered by a new packet (sendmmsg), until
 *       PACKETS results came. Prints one JSON line: packets, seconds, and the CPU
 *       (user + system) and the kernel's part (system) in microseconds per packet.
 *
 * No window, no timers, no parsing: what any worker must pay for its packets, and no
 * more. A result lost (the reflector's queue full) would stall it: it stops after
 * 2 s without one, exit 3.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 32
#define SLOT 2048
/* The INA flags, in the payload's second byte: given by the build (ina.bench.host)
 * from ina.protocol.constants.Flag, their one source. */
#if !defined(FLAG_SYNC) || !defined(FLAG_REPLY) || !defined(FLAG_RESULT)
#error "build with -DFLAG_SYNC= -DFLAG_REPLY= -DFLAG_RESULT= (ina.bench.host does)"
#endif

static unsigned char slots[BATCH][SLOT];
static struct iovec iov[BATCH];
static struct sockaddr_in from[BATCH];
static struct mmsghdr msgs[BATCH];

static int fail(const char *what) {
    fprintf(stderr, "hostloop: %s: %s\n", what, strerror(errno));
    return 2;
}

static void prepare(int with_names) {
    memset(msgs, 0, sizeof msgs);
    for (int i = 0; i < BATCH; i++) {
        iov[i].iov_base = slots[i];
        iov[i].iov_len = SLOT;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        if (with_names) {
            msgs[i].msg_hdr.msg_name = &from[i];
            msgs[i].msg_hdr.msg_namelen = sizeof from[i];
        }
    }
}

static int udp_socket(const char *address, int port, struct sockaddr_in *where) {
    int sock = socket(AF_INET, SOCK_DGRAM, 0);
    int buffer = 4 << 20;
    if (sock < 0)
        return -1;
    setsockopt(sock, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
    setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
    memset(where, 0, sizeof *where);
    where->sin_family = AF_INET;
    where->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, address, &where->sin_addr) != 1) {
        errno = EINVAL;
        close(sock);
        return -1;
    }
    return sock;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void answer(unsigned char *payload, unsigned len) {
    if (len >= 2)
        payload[1] |= (payload[1] & FLAG_SYNC) ? FLAG_REPLY : FLAG_RESULT;
}

static int reflect(const char *address, int port, long gap_us) {
    struct sockaddr_in here;
    int sock = udp_socket(address, port, &here);
    if (sock < 0 || bind(sock, (struct sockaddr *)&here, sizeof here) < 0)
        return fail("bind");
    printf("ready\n");
    fflush(stdout);
    double due = 0.0;
    for (;;) {
        prepare(1);
        int n = recvmmsg(sock, msgs, gap_us > 0 ? 1 : BATCH, MSG_WAITFORONE, NULL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return fail("recvmmsg");
        }
        for (int i = 0; i < n; i++) {
            answer(slots[i], msgs[i].msg_len);
            iov[i].iov_len = msgs[i].msg_len;
        }
        if (gap_us > 0) {
            double t = now();
            due = (due + gap_us * 1e-6 > t) ? due + gap_us * 1e-6 : t;
            double wait = due - now();
            if (wait > 0) {
                struct timespec w = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
                nanosleep(&w, NULL);
            }
        }
        if (sendmmsg(sock, msgs, (unsigned)n, 0) < 0 && errno != EAGAIN)
            return fail("sendmmsg");
    }
}

static double seconds_of(struct timeval t) { return (double)t.tv_sec + t.tv_usec * 1e-6; }

static int worker(const char *address, int port, long packets, long size, long inflight) {
    struct sockaddr_in here, there;
    int sock = udp_socket("127.0.0.1", 0, &here);
    if (sock < 0 || bind(sock, (struct sockaddr *)&here, sizeof here) < 0)
        return fail("bind");
    if (udp_socket(address, port, &there) < 0)
        return fail("address");
    if (connect(sock, (struct sockaddr *)&there, sizeof there) < 0)
        return fail("connect");
    if (size < 2 || size > SLOT || inflight < 1 || packets < 1) {
        fprintf(stderr, "hostloop: size 2..%d, inflight and packets >= 1\n", SLOT);
        return 2;
    }
    unsigned char *packet = calloc(1, (size_t)size);
    unsigned char *result = malloc((size_t)size * BATCH);
    struct mmsghdr out[BATCH];
    struct iovec out_iov[BATCH];
    memset(out, 0, sizeof out);
    for (int i = 0; i < BATCH; i++) {
        out_iov[i].iov_base = packet;
        out_iov[i].iov_len = (size_t)size;
        out[i].msg_hdr.msg_iov = &out_iov[i];
        out[i].msg_hdr.msg_iovlen = 1;
    }
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    double started = now();
    long sent = 0, got = 0;
    while (sent < inflight) {
        int k = sendmmsg(sock, out, (unsigned)(inflight - sent < BATCH ? inflight - sent : BATCH), 0);
        if (k < 0)
            return fail("sendmmsg");
        sent += k;
    }
    struct pollfd waiting = {sock, POLLIN, 0};
    while (got < packets) {
        if (poll(&waiting, 1, 2000) <= 0) {
            fprintf(stderr, "hostloop: %ld of %ld results, then none for 2 s\n", got, packets);
            return 3;
        }
        prepare(0);
        int n = recvmmsg(sock, msgs, BATCH, MSG_DONTWAIT, NULL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            return fail("recvmmsg");
        }
        for (int i = 0; i < n; i++)  /* placed, as a worker places its results */
            memcpy(result + (size_t)i * size, slots[i], msgs[i].msg_len < (unsigned)size
                   ? msgs[i].msg_len : (size_t)size);
        got += n;
        long more = n < packets - sent ? n : packets - sent;
        while (more > 0) {
            int k = sendmmsg(sock, out, (unsigned)more, 0);
            if (k < 0)
                return fail("sendmmsg");
            more -= k;
            sent += k;
        }
    }
    double elapsed = now() - started;
    getrusage(RUSAGE_SELF, &after);
    double user = seconds_of(after.ru_utime) - seconds_of(before.ru_utime);
    double system = seconds_of(after.ru_stime) - seconds_of(before.ru_stime);
    printf("{\"packets\": %ld, \"seconds\": %.6f, \"cpu_us_per_packet\": %.3f, "
           "\"kernel_us_per_packet\": %.3f}\n", got, elapsed, 1e6 * (user + system) / got,
           1e6 * system / got);
    free(packet);
    free(result);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "reflect") == 0)
        return reflect(argv[2], atoi(argv[3]), atol(argv[4]));
    if (argc == 7 && strcmp(argv[1], "worker") == 0)
        return worker(argv[2], atoi(argv[3]), atol(argv[4]), atol(argv[5]), atol(argv[6]));
    fprintf(stderr, "usage: hostloop reflect ADDRESS PORT GAP_US\n"
                    "       hostloop worker ADDRESS PORT PACKETS SIZE INFLIGHT\n");
    return 2;
}
