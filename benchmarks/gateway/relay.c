/* The floor of a proxy hop, compiled: a single-threaded epoll TCP relay with no parsing. Each accepted client
 * connection gets its own upstream connection; bytes are passed on as read (TCP_NODELAY both ways).
 * Used by benchmarks/gateway/run.py --c-relay beside the uvloop relay; built there with `cc -O2`.
 * usage: relay UPSTREAM_HOST UPSTREAM_PORT LISTEN_PORT */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXFD 65536
static int peer[MAXFD];

static void tune(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void drop(int ep, int fd) {
    int other = peer[fd];
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    peer[fd] = -1;
    if (other >= 0) {
        epoll_ctl(ep, EPOLL_CTL_DEL, other, NULL);
        close(other);
        peer[other] = -1;
    }
}

static int pass(int from, int to) { /* 0: keep, -1: close both */
    char buf[65536];
    for (;;) {
        ssize_t n = read(from, buf, sizeof buf);
        if (n == 0) return -1;
        if (n < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
        for (ssize_t off = 0; off < n;) { /* blocking write on a non-blocking socket: spin on EAGAIN (small bodies) */
            ssize_t w = write(to, buf + off, (size_t)(n - off));
            if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
            if (w > 0) off += w;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: relay UPSTREAM_HOST UPSTREAM_PORT LISTEN_PORT\n"); return 2; }
    struct sockaddr_in up = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &up.sin_addr);
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3]))};
    inet_pton(AF_INET, "127.0.0.1", &me.sin_addr);
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(ls, (struct sockaddr *)&me, sizeof me) || listen(ls, 4096)) { perror("listen"); return 1; }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    memset(peer, -1, sizeof peer);
    struct epoll_event got[256];
    for (;;) {
        int n = epoll_wait(ep, got, 256, -1);
        for (int i = 0; i < n; i++) {
            int fd = got[i].data.fd;
            if (fd == ls) {
                int c = accept(ls, NULL, NULL);
                if (c < 0 || c >= MAXFD) { if (c >= 0) close(c); continue; }
                int u = socket(AF_INET, SOCK_STREAM, 0);
                if (u < 0 || u >= MAXFD || connect(u, (struct sockaddr *)&up, sizeof up)) {
                    close(c); if (u >= 0) close(u); continue;
                }
                tune(c); tune(u);
                fcntl(c, F_SETFL, O_NONBLOCK); fcntl(u, F_SETFL, O_NONBLOCK);
                peer[c] = u; peer[u] = c;
                struct epoll_event a = {.events = EPOLLIN, .data.fd = c}, b = {.events = EPOLLIN, .data.fd = u};
                epoll_ctl(ep, EPOLL_CTL_ADD, c, &a);
                epoll_ctl(ep, EPOLL_CTL_ADD, u, &b);
            } else if (peer[fd] >= 0 && pass(fd, peer[fd]) < 0) {
                drop(ep, fd);
            }
        }
    }
}
