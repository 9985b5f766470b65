// Progress display: a redrawn bar on a terminal, plain periodic lines in a
// log or pipe, nothing when quiet.
#include "progress.h"

#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define PROGRESS_REDRAW_S 0.1   // at most ten redraws a second on a terminal
#define PROGRESS_PLAIN_S 10.0   // default seconds between plain lines

// --- time and formatting ----------------------------------------------------

// Monotonic time in seconds.
double progress_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Formats seconds as "m:ss" or "h:mm:ss"; "?" when negative or huge.
void progress_fmt_time(double s, char *out, size_t len) {
    if (!(s >= 0) || s > 1e8) {
        snprintf(out, len, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(out, len, "%ld:%02ld", t / 60, t % 60);
}

// Formats a rate in items per second with a sensible number of digits.
static void progress_fmt_rate(double r, char *out, size_t len) {
    if (r >= 100) snprintf(out, len, "%.0f/s", r);
    else if (r >= 1) snprintf(out, len, "%.1f/s", r);
    else snprintf(out, len, "%.3f/s", r);
}

// Terminal width of the stream, 80 when unknown.
static int progress_columns(FILE *f) {
    struct winsize ws;
    if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 80;
}

// --- drawing ----------------------------------------------------------------

// Items per second done in this run (those before a resume left out).
static double progress_rate(const progress *p, double el) {
    return el > 0 ? (double)(p->done - p->base) / el : 0;
}

// Builds the terminal line: label, bar, count, rate, elapsed<ETA, extra.
static void progress_tty_text(const progress *p, double now, char *buf, size_t len) {
    double el = now - p->t0, rate = progress_rate(p, el);
    char e[16], eta[16], r[24], bar[32] = "";
    progress_fmt_time(el, e, sizeof e);
    progress_fmt_rate(rate, r, sizeof r);
    if (p->total > 0) {
        double frac = (double)p->done / (double)p->total;
        frac = frac < 0 ? 0 : frac > 1 ? 1 : frac;
        int w = 20, fill = (int)(frac * w + 1e-9);
        bar[0] = '[';
        for (int i = 0; i < w; i++) bar[1 + i] = i < fill ? '#' : '.';
        bar[w + 1] = ']';
        bar[w + 2] = '\0';
        progress_fmt_time(rate > 0 ? (double)(p->total - p->done) / rate : -1, eta, sizeof eta);
        snprintf(buf, len, "%s %s %ld/%ld %s %s<%s %s", p->label, bar, p->done, p->total, r, e,
                 eta, p->extra);
    } else {
        snprintf(buf, len, "%s %ld %s %s %s", p->label, p->done, r, e, p->extra);
    }
}

// Redraws the terminal line in place, cut to the terminal's width.
static void progress_tty_draw(progress *p, double now) {
    char buf[512];
    progress_tty_text(p, now, buf, sizeof buf);
    int cols = progress_columns(p->f);
    if ((int)strlen(buf) > cols - 1) buf[cols - 1] = '\0';
    fprintf(p->f, "\r%s\x1b[K", buf);
    fflush(p->f);
    p->drawn = 1;
    p->last = now;
}

// Prints one plain line (for logs): count, percent, rate, elapsed, ETA.
static void progress_plain_line(progress *p, double now, int final) {
    double el = now - p->t0, rate = progress_rate(p, el);
    char e[16], eta[16], r[24];
    progress_fmt_time(el, e, sizeof e);
    progress_fmt_rate(rate, r, sizeof r);
    if (final) {
        char n[48];
        if (p->total > 0) snprintf(n, sizeof n, "%ld/%ld", p->done, p->total);
        else snprintf(n, sizeof n, "%ld", p->done);
        fprintf(p->f, "%s: %s done in %s (%s)%s%s\n", p->label, n, e, r,
                p->extra[0] ? " " : "", p->extra);
    } else if (p->total > 0) {
        progress_fmt_time(rate > 0 ? (double)(p->total - p->done) / rate : -1, eta, sizeof eta);
        fprintf(p->f, "%s: %ld/%ld (%.0f%%) %s elapsed %s eta %s%s%s\n", p->label, p->done,
                p->total, 100.0 * (double)p->done / (double)p->total, r, e, eta,
                p->extra[0] ? " " : "", p->extra);
    } else {
        fprintf(p->f, "%s: %ld %s elapsed %s%s%s\n", p->label, p->done, r, e,
                p->extra[0] ? " " : "", p->extra);
    }
    fflush(p->f);
    p->last = now;
}

// --- public API -------------------------------------------------------------

// Starts a display; on a terminal the empty bar is drawn at once.
void progress_start(progress *p, FILE *f, const char *label, long total, int quiet) {
    memset(p, 0, sizeof *p);
    p->f = f;
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    p->total = total;
    p->quiet = quiet;
    p->tty = isatty(fileno(f));
    p->interval = PROGRESS_PLAIN_S;
    p->t0 = p->last = progress_clock();
    if (!quiet && p->tty) progress_tty_draw(p, p->t0);
}

// Counts items done before this run without drawing.
void progress_resume(progress *p, long done) { p->base = p->done = done; }

// Records progress and redraws or prints a plain line when one is due.
void progress_update(progress *p, long done, const char *extra) {
    p->done = done;
    if (extra) snprintf(p->extra, sizeof p->extra, "%s", extra);
    if (p->quiet) return;
    double now = progress_clock();
    if (p->tty) {
        if (now - p->last >= PROGRESS_REDRAW_S || !p->drawn) progress_tty_draw(p, now);
    } else if (now - p->last >= p->interval) {
        progress_plain_line(p, now, 0);
    }
}

// Ends the display: final redraw plus newline, or one plain summary line.
void progress_finish(progress *p, const char *extra) {
    if (extra) snprintf(p->extra, sizeof p->extra, "%s", extra);
    if (p->quiet) return;
    double now = progress_clock();
    if (p->tty) {
        progress_tty_draw(p, now);
        fputc('\n', p->f);
        fflush(p->f);
        p->drawn = 0;
    } else {
        progress_plain_line(p, now, 1);
    }
}

// Seconds since progress_start.
double progress_elapsed(const progress *p) { return progress_clock() - p->t0; }

// Prints a log line around a terminal progress line without garbling it.
void progress_log(progress *p, const char *fmt, ...) {
    if (p->quiet) return;
    if (p->tty && p->drawn) fputs("\r\x1b[K", p->f);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->f, fmt, ap);
    va_end(ap);
    fputc('\n', p->f);
    if (p->tty && p->drawn) progress_tty_draw(p, progress_clock());
    fflush(p->f);
}

// Prints fmt plus a newline to f unless quiet, and flushes.
void log_line(FILE *f, int quiet, const char *fmt, ...) {
    if (quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fflush(f);
}
