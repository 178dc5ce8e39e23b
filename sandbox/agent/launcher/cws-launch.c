/*
 * cws-launch: the agent's launcher for same-uid mode, in C so that a command's start
 * costs a fork and two execs, not the start of a Go runtime (about 3 ms per command
 * on a 2-core machine; this one starts in well under a millisecond).
 *
 * It does exactly what `cws-agent launch -ruleset-fd N -status-fd M -- FILE ARGV0
 * ARGS...` does (package launch, Ruleset.StartVia): restrict itself with the Landlock
 * ruleset on descriptor N (no_new_privs first, as Landlock requires), close it so the
 * command does not inherit it, and exec FILE with ARGV0 ARGS... and the environment
 * in its place. The status descriptor M is close-on-exec: the agent reads EOF once the
 * command runs, or the refusal written there ("exec sh: permission denied").
 *
 * Built static (make build: bin/cws-launch); the agent uses it when it lies beside its
 * own binary, and `cws-agent launch` otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif

extern char **environ;

static int status_fd = -1;

/* fail reports msg on the status descriptor (when given) and on stderr, and exits 126
 * as `cws-agent launch` does. */
static void fail(const char *msg) {
	if (status_fd >= 0) {
		ssize_t n = write(status_fd, msg, strlen(msg));
		(void)n;
	}
	fprintf(stderr, "cws-launch: %s\n", msg);
	exit(126);
}

/* number parses a descriptor number. */
static int number(const char *s) {
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *s == '\0' || *end != '\0' || v < 0 || v > 1 << 20)
		return -1;
	return (int)v;
}

int main(int argc, char **argv) {
	char msg[512];
	int ruleset_fd = -1, i = 1;
	if (i < argc && strcmp(argv[i], "launch") == 0)
		i++; /* called as the agent calls its own binary: "launch" first */
	for (; i + 1 < argc && argv[i][0] == '-' && strcmp(argv[i], "--") != 0; i += 2) {
		if (strcmp(argv[i], "-ruleset-fd") == 0 || strcmp(argv[i], "--ruleset-fd") == 0)
			ruleset_fd = number(argv[i + 1]);
		else if (strcmp(argv[i], "-status-fd") == 0 || strcmp(argv[i], "--status-fd") == 0)
			status_fd = number(argv[i + 1]);
		else
			break;
	}
	if (status_fd >= 0 && fcntl(status_fd, F_SETFD, FD_CLOEXEC) != 0)
		status_fd = -1;
	if (ruleset_fd < 0 || i >= argc || strcmp(argv[i], "--") != 0 || argc - i < 3)
		fail("usage: cws-launch [launch] -ruleset-fd N [-status-fd M] -- FILE ARGV0 [ARGS...]");
	if (fcntl(ruleset_fd, F_SETFD, FD_CLOEXEC) != 0) {
		snprintf(msg, sizeof msg, "landlock: ruleset descriptor %d: %s", ruleset_fd, strerror(errno));
		fail(msg);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		snprintf(msg, sizeof msg, "landlock: prctl(PR_SET_NO_NEW_PRIVS): %s", strerror(errno));
		fail(msg);
	}
	if (syscall(SYS_landlock_restrict_self, ruleset_fd, 0) != 0) {
		snprintf(msg, sizeof msg, "landlock: restrict: %s", strerror(errno));
		fail(msg);
	}
	close(ruleset_fd);
	const char *file = argv[i + 1];
	execve(file, &argv[i + 2], environ);
	/* Worded as Go's syscall errors are: lower case. */
	const char *why = strerror(errno);
	snprintf(msg, sizeof msg, "exec %s: %c%s", argv[i + 2], why[0] >= 'A' && why[0] <= 'Z' ? why[0] - 'A' + 'a' : why[0], why + 1);
	fail(msg);
	return 126;
}
