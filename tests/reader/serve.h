/* serve.h - a dataset directory served over HTTP on 127.0.0.1 by Python's
 * http.server (answering a Range header with its bytes), for the tests of
 * datasets at URLs in C (url_test.c, source_test.c).  Header-only: each
 * test is one file. */
#ifndef CXS_TEST_SERVE_H
#define CXS_TEST_SERVE_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "ctxshard.h"
#include "testdata.h"

/* A port free on 127.0.0.1 now, or -1. */
static int serve_free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) || getsockname(s, (struct sockaddr *)&a, &l))
        return -1;
    close(s);
    return ntohs(a.sin_port);
}

static int serve_up(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    if (s >= 0) close(s);
    return ok;
}

/* Python's http.server, answering a Range header with its bytes (206) */
static const char *const serve_py =
    "import http.server, os, re, sys\n"
    "class H(http.server.SimpleHTTPRequestHandler):\n"
    "    def send_head(self):\n"
    "        m = re.match(r'bytes=(\\d+)-(\\d+)$', self.headers.get('Range', ''))\n"
    "        p = self.translate_path(self.path)\n"
    "        if not m or not os.path.isfile(p):\n"
    "            return super().send_head()\n"
    "        f = open(p, 'rb'); n = os.fstat(f.fileno()).st_size\n"
    "        lo, hi = int(m.group(1)), min(int(m.group(2)), n - 1)\n"
    "        f.seek(lo); body = f.read(hi - lo + 1); f.close()\n"
    "        self.send_response(206)\n"
    "        self.send_header('Content-Range', 'bytes %d-%d/%d' % (lo, hi, n))\n"
    "        self.send_header('Content-Length', str(len(body)))\n"
    "        self.end_headers()\n"
    "        import io; return io.BytesIO(body)\n"
    "os.chdir(sys.argv[2])\n"
    "http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n";

/* Serve directory root on port (waiting up to 10 s for it to answer):
 * the server's pid, for serve_stop. */
static pid_t serve_start(int port, const char *root) {
    pid_t pid = fork();
    if (pid == 0) {
        char p[16];
        snprintf(p, sizeof p, "%d", port);
        if (!freopen("/dev/null", "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(127);
        execl("/usr/bin/python3", "python3", "-c", serve_py, p, root, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 400 && !serve_up(port); i++) usleep(25000);
    return pid;
}

static void serve_stop(pid_t *pid) {
    if (*pid > 0) {
        kill(*pid, SIGTERM);
        waitpid(*pid, NULL, 0);
        *pid = -1;
    }
}

/* What every such test starts with: a fresh directory /tmp/cxs-NAME-XXXXXX
 * (dir, 256 bytes), the writer-made dataset dir/ds (packed, 300) served at
 * url (300) by a server on *port (*pid), and an empty cache dir/cache
 * (cache, 300; CTXSHARD_CACHE: never the user's).  0; 77 without
 * /usr/bin/python3 or libcurl (said on stdout); 3 when the setup fails. */
static int serve_setup(const char *name, char *dir, char *packed, char *cache, char *url,
                       int *port, pid_t *pid) {
    if (access("/usr/bin/python3", X_OK)) {
        puts("SKIP: no /usr/bin/python3 to serve the dataset over HTTP");
        return 77;
    }
    snprintf(dir, 256, "/tmp/cxs-%s-XXXXXX", name);
    if (!mkdtemp(dir)) return 3;
    snprintf(packed, 300, "%s/ds", dir);
    snprintf(cache, 300, "%s/cache", dir);
    setenv("CTXSHARD_CACHE", cache, 1);
    td_opts o = {.utts = 40, .dim = 8, .seed = 3, .shard_size = 256u << 10};
    if (td_make(packed, &o)) return 3;
    if ((*port = serve_free_port()) < 0) return 3;
    snprintf(url, 300, "http://127.0.0.1:%d/ds", *port);
    cxs_diag d;
    cxs_dataset *probe = NULL;
    *pid = serve_start(*port, dir);
    int rc = cxs_dataset_open_ex(url, NULL, &probe, &d);
    cxs_dataset_close(probe);
    if (rc == CXS_E_UNSUPPORTED) {
        serve_stop(pid);
        printf("SKIP: %s\n", d.message);
        return 77;
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
    if (system(cmd)) return 3;
    setenv("CTXSHARD_HTTP_TIMEOUT", "5", 1);
    return 0;
}

/* The server stopped and dir removed: 0 or 3. */
static int serve_teardown(const char *dir, pid_t *pid) {
    serve_stop(pid);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) ? 3 : 0;
}

#endif
