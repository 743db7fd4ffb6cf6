/* ompi_allreduce: MPI_Allreduce bandwidth benchmark, the MPI peer of gsync-perf.
 *
 *   mpirun -np 4 --mca btl tcp,self --mca btl_tcp_if_include lo \
 *       ompi_allreduce -b 8 -e 64M -f 2 -n 20 -w 5 -c 1 --json ompi.json
 *
 * Follows the methodology of gsync-perf (and of nccl-tests' all_reduce_perf) so that the numbers can
 * be put side by side: the same size sweep (-b/-e with K/M/G suffixes, geometric with -f or
 * additive with -i, sizes rounded down to whole float32 elements), out-of-place MPI_Allreduce of
 * MPI_FLOAT with MPI_SUM, an optional check of one result per size (-c 1, before the warmup), -w
 * untimed warmup iterations, MPI_Barrier, then -n timed iterations. Each rank measures
 * elapsed / iters; the reported time is the largest over ranks. algbw = bytes / time and
 * busbw = algbw * 2(N-1)/N, in GB/s (1e9 bytes per second).
 *
 * Inputs are small integers times (rank + 1), so every partial sum is exact in float32 and the check
 * compares for equality.
 *
 * --json FILE writes the rows in gsync-perf's JSON schema, with "transport" set by --label
 * (default "ompi-tcp") and "algo" by --label-algo (default "ompi-default").
 *
 * Exit status: 0 when every check passed, 1 when an element was wrong, 2 for usage errors, 3 for
 * run-time failures.
 */

#include <mpi.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EXIT_OK = 0, EXIT_WRONG = 1, EXIT_USAGE = 2, EXIT_FAILURE_RT = 3 };

struct options {
  size_t min_bytes;
  size_t max_bytes;
  double factor;
  size_t increment; /* 0 = geometric */
  int iters;
  int warmup;
  int check;
  const char *json_path;
  const char *label;
  const char *label_algo;
  int help;
};

struct row {
  size_t bytes;
  size_t count;
  double time_us;
  double algbw;
  double busbw;
  long long wrong; /* -1 = not checked */
};

static int g_rank = 0;

static void usage(FILE *f) {
  fprintf(f,
          "usage: ompi_allreduce [options]   (start with mpirun)\n"
          "  -b, --minbytes SIZE     smallest message in bytes, K/M/G suffixes (default 8)\n"
          "  -e, --maxbytes SIZE     largest message in bytes (default 64M)\n"
          "  -f, --stepfactor F      multiply the size by F each step (default 2)\n"
          "  -i, --stepbytes SIZE    add SIZE bytes each step instead of multiplying\n"
          "  -d, --datatype float32  element type (only float32 / float)\n"
          "  -o, --op sum            reduction (only sum)\n"
          "  -n, --iters N           timed iterations per size (default 20)\n"
          "  -w, --warmup_iters N    untimed iterations before timing (default 5)\n"
          "  -c, --check 0|1         check one result per size (default 1)\n"
          "      --json FILE         rank 0 also writes the results to FILE as JSON\n"
          "      --label NAME        \"transport\" written to the JSON (default ompi-tcp)\n"
          "      --label-algo NAME   \"algo\" written to the table and JSON (default ompi-default)\n"
          "  -h, --help              this text\n"
          "exit status: 0 all correct, 1 wrong results, 2 usage error, 3 run-time failure\n");
}

/* Parses "8", "64K", "1M", "2G" (1024-based; an optional trailing 'B' or "iB" is accepted).
 * Returns 0 on success. */
static int parse_size(const char *s, size_t *out) {
  if (s == NULL || !isdigit((unsigned char)s[0])) return -1;
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0) return -1;
  unsigned long long mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1ull << 10; ++end; break;
    case 'M': mult = 1ull << 20; ++end; break;
    case 'G': mult = 1ull << 30; ++end; break;
    default: break;
  }
  if (mult != 1 && (*end == 'i' || *end == 'I')) ++end;
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return -1;
  if (v > SIZE_MAX / mult) return -1;
  *out = (size_t)(v * mult);
  return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  if (s == NULL || *s == '\0') return -1;
  errno = 0;
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static int streq_ci(const char *a, const char *b) {
  for (; *a && *b; ++a, ++b)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
  return *a == *b;
}

/* Parses the command line into *o. Returns 0, or -1 after putting a message in err. */
static int parse_args(int argc, char **argv, struct options *o, char *err, size_t errlen) {
  int factor_given = 0;
  o->min_bytes = 8;
  o->max_bytes = (size_t)64 << 20;
  o->factor = 2.0;
  o->increment = 0;
  o->iters = 20;
  o->warmup = 5;
  o->check = 1;
  o->json_path = NULL;
  o->label = "ompi-tcp";
  o->label_algo = "ompi-default";
  o->help = 0;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    const char *v = NULL;
    char name[64];
    /* --name=value and -xVALUE forms */
    if (strncmp(a, "--", 2) == 0 && strchr(a, '=') != NULL) {
      size_t n = (size_t)(strchr(a, '=') - a);
      if (n >= sizeof name) n = sizeof name - 1;
      memcpy(name, a, n);
      name[n] = '\0';
      v = strchr(a, '=') + 1;
      a = name;
    } else if (a[0] == '-' && a[1] != '-' && isalpha((unsigned char)a[1]) && a[2] != '\0') {
      name[0] = '-';
      name[1] = a[1];
      name[2] = '\0';
      v = a + 2;
      a = name;
    }
#define NEXT()                                                        \
  do {                                                                \
    if (v == NULL) {                                                  \
      if (i + 1 >= argc) {                                            \
        snprintf(err, errlen, "%s needs a value", a);                 \
        return -1;                                                    \
      }                                                               \
      v = argv[++i];                                                  \
    }                                                                 \
  } while (0)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      o->help = 1;
    } else if (!strcmp(a, "-b") || !strcmp(a, "--minbytes")) {
      NEXT();
      if (parse_size(v, &o->min_bytes) != 0) goto bad_size;
    } else if (!strcmp(a, "-e") || !strcmp(a, "--maxbytes")) {
      NEXT();
      if (parse_size(v, &o->max_bytes) != 0) goto bad_size;
    } else if (!strcmp(a, "-i") || !strcmp(a, "--stepbytes")) {
      NEXT();
      if (parse_size(v, &o->increment) != 0 || o->increment == 0) goto bad_size;
    } else if (!strcmp(a, "-f") || !strcmp(a, "--stepfactor")) {
      NEXT();
      char *end = NULL;
      o->factor = strtod(v, &end);
      if (*v == '\0' || *end != '\0' || !(o->factor > 1.0) || !isfinite(o->factor)) {
        snprintf(err, errlen, "%s '%s' is not a number greater than 1", a, v);
        return -1;
      }
      factor_given = 1;
    } else if (!strcmp(a, "-d") || !strcmp(a, "--datatype")) {
      NEXT();
      if (!streq_ci(v, "float32") && !streq_ci(v, "float") && !streq_ci(v, "fp32") && !streq_ci(v, "f32")) {
        snprintf(err, errlen, "%s '%s': only float32 is supported", a, v);
        return -1;
      }
    } else if (!strcmp(a, "-o") || !strcmp(a, "--op")) {
      NEXT();
      if (!streq_ci(v, "sum")) {
        snprintf(err, errlen, "%s '%s': only sum is supported", a, v);
        return -1;
      }
    } else if (!strcmp(a, "-n") || !strcmp(a, "--iters")) {
      NEXT();
      if (parse_int(v, 1, 1 << 30, &o->iters) != 0) goto bad_int;
    } else if (!strcmp(a, "-w") || !strcmp(a, "--warmup_iters")) {
      NEXT();
      if (parse_int(v, 0, 1 << 30, &o->warmup) != 0) goto bad_int;
    } else if (!strcmp(a, "-c") || !strcmp(a, "--check")) {
      NEXT();
      if (parse_int(v, 0, 1, &o->check) != 0) goto bad_int;
    } else if (!strcmp(a, "--json")) {
      NEXT();
      if (*v == '\0') {
        snprintf(err, errlen, "--json needs a file name");
        return -1;
      }
      o->json_path = v;
    } else if (!strcmp(a, "--label")) {
      NEXT();
      o->label = v;
    } else if (!strcmp(a, "--label-algo")) {
      NEXT();
      o->label_algo = v;
    } else {
      snprintf(err, errlen, "unknown option '%s' (see -h)", argv[i]);
      return -1;
    }
    continue;
  bad_size:
    snprintf(err, errlen, "%s '%s' is not a size such as 8, 64K or 1M", a, v);
    return -1;
  bad_int:
    snprintf(err, errlen, "%s '%s' is not an integer in range", a, v);
    return -1;
#undef NEXT
  }
  if (o->help) return 0;
  if (factor_given && o->increment != 0) {
    snprintf(err, errlen, "give either -f (multiply) or -i (add), not both");
    return -1;
  }
  if (o->min_bytes == 0) {
    snprintf(err, errlen, "-b must be at least 1 byte");
    return -1;
  }
  if (o->max_bytes < o->min_bytes) {
    snprintf(err, errlen, "-e must not be smaller than -b");
    return -1;
  }
  return 0;
}

/* The size after s in the sweep, or 0 when s is the last (same rule as gsync-perf). */
static size_t next_size(const struct options *o, size_t s) {
  if (o->increment != 0) {
    if (s > o->max_bytes - o->increment) return 0;
    return s + o->increment;
  }
  double d = (double)s * o->factor;
  if (!(d <= (double)o->max_bytes)) return 0;
  size_t n = (size_t)d;
  return n > s ? n : s + 1;
}

/* Input of rank r at element i: a small integer times (r + 1), so sums are exact in float. */
static float input_value(int r, size_t i) { return (float)((r + 1) * (int)(1 + (i * 7 + 3) % 13)); }

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

/* Writes the rows in gsync-perf's schema and closes f; 0 on success. */
static int write_json(FILE *f, int world, const struct options *o, const struct row *rows, size_t nrows) {
  fprintf(f, "{\"world_size\": %d, \"transport\": ", world);
  json_string(f, o->label);
  fprintf(f, ", \"rows\": [");
  for (size_t k = 0; k < nrows; ++k) {
    const struct row *r = &rows[k];
    fprintf(f, "%s\n  {\"op\": \"allreduce\", \"bytes\": %zu, \"count\": %zu, \"dtype\": \"float32\", "
               "\"redop\": \"sum\", \"algo\": ",
            k ? "," : "", r->bytes, r->count);
    json_string(f, o->label_algo);
    fprintf(f, ", \"time_us\": %.6g, \"algbw_gbs\": %.6g, \"busbw_gbs\": %.6g, \"wrong\": ", r->time_us, r->algbw,
            r->busbw);
    if (r->wrong >= 0) fprintf(f, "%lld}", r->wrong);
    else fprintf(f, "null}");
  }
  fprintf(f, "%s]}\n", nrows ? "\n" : "");
  int bad = ferror(f) != 0;
  if (fclose(f) != 0) bad = 1;
  return bad ? -1 : 0;
}

static void die_rt(const char *what, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fprintf(stderr, "ompi_allreduce: rank %d: %s failed: %s\n", g_rank, what, msg);
  MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE_RT);
  exit(EXIT_FAILURE_RT);
}

#define CHECK_MPI(call)                    \
  do {                                     \
    int rc_ = (call);                      \
    if (rc_ != MPI_SUCCESS) die_rt(#call, rc_); \
  } while (0)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  struct options o;
  char err[512];
  if (parse_args(argc, argv, &o, err, sizeof err) != 0) {
    if (g_rank == 0) fprintf(stderr, "ompi_allreduce: %s\n", err);
    MPI_Finalize();
    return EXIT_USAGE;
  }
  if (o.help) {
    if (g_rank == 0) usage(stdout);
    MPI_Finalize();
    return EXIT_OK;
  }

  /* Rank 0 opens the JSON file first, so that a bad path stops every rank before the benchmark. */
  FILE *json = NULL;
  int json_failed = 0;
  if (g_rank == 0 && o.json_path != NULL) {
    json = fopen(o.json_path, "w");
    if (json == NULL) {
      fprintf(stderr, "ompi_allreduce: cannot open --json file '%s': %s\n", o.json_path, strerror(errno));
      json_failed = 1;
    }
  }
  CHECK_MPI(MPI_Bcast(&json_failed, 1, MPI_INT, 0, MPI_COMM_WORLD));
  if (json_failed) {
    MPI_Finalize();
    return EXIT_USAGE;
  }

  const size_t max_count = o.max_bytes / sizeof(float);
  size_t nsizes = 0;
  for (size_t s = o.min_bytes; s != 0; s = next_size(&o, s)) ++nsizes;
  struct row *rows = calloc(nsizes ? nsizes : 1, sizeof *rows);
  float *in = malloc((max_count ? max_count : 1) * sizeof(float));
  float *out = malloc((max_count ? max_count : 1) * sizeof(float));
  if (rows == NULL || in == NULL || out == NULL) {
    fprintf(stderr, "ompi_allreduce: rank %d: out of memory\n", g_rank);
    MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE_RT);
    return EXIT_FAILURE_RT;
  }
  for (size_t i = 0; i < max_count; ++i) {
    in[i] = input_value(g_rank, i);
    out[i] = 0.0f;
  }
  /* Expected sum at element i: base(i) * N(N+1)/2. */
  const long long ranks_sum = (long long)world * (world + 1) / 2;

  if (g_rank == 0) {
    printf("# ompi_allreduce: %d ranks, transport %s, dtype float32, op sum, algo %s, iters %d, warmup %d, check %d, "
           "out of place\n",
           world, o.label, o.label_algo, o.iters, o.warmup, o.check);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
      char *nl = strchr(lib, '\n');
      if (nl) *nl = '\0';
      printf("# library: %s\n", lib);
    }
    printf("# time = max over ranks of the mean per iteration\n#\n");
    printf("# %11s %13s %9s %6s %14s %11s %10s %10s %7s\n", "size", "count", "type", "redop", "algo", "time",
           "algbw", "busbw", "#wrong");
    printf("# %11s %13s %9s %6s %14s %11s %10s %10s %7s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    fflush(stdout);
  }

  size_t nrows = 0;
  long long wrong_total = 0;
  double busbw_sum = 0.0;
  for (size_t s = o.min_bytes; s != 0; s = next_size(&o, s)) {
    const size_t count = s / sizeof(float);
    if (count == 0) continue;
    if (count > (size_t)0x7fffffff) {
      if (g_rank == 0) fprintf(stderr, "ompi_allreduce: %zu elements do not fit an MPI int count\n", count);
      MPI_Abort(MPI_COMM_WORLD, EXIT_USAGE);
    }
    const int icount = (int)count;
    struct row *r = &rows[nrows++];
    r->bytes = count * sizeof(float);
    r->count = count;
    r->wrong = -1;

    if (o.check) {
      memset(out, 0, count * sizeof(float));
      CHECK_MPI(MPI_Allreduce(in, out, icount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
      long long wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        const float expect = (float)((long long)(1 + (i * 7 + 3) % 13) * ranks_sum);
        if (out[i] != expect) ++wrong;
      }
      long long total = 0;
      CHECK_MPI(MPI_Allreduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
      r->wrong = total;
      wrong_total += total;
    }

    for (int w = 0; w < o.warmup; ++w)
      CHECK_MPI(MPI_Allreduce(in, out, icount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    const double t0 = MPI_Wtime();
    for (int it = 0; it < o.iters; ++it)
      CHECK_MPI(MPI_Allreduce(in, out, icount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    const double t1 = MPI_Wtime();
    double time_us = (t1 - t0) * 1e6 / o.iters;
    double max_us = 0.0;
    CHECK_MPI(MPI_Reduce(&time_us, &max_us, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));

    if (g_rank == 0) {
      r->time_us = max_us;
      r->algbw = max_us > 0 ? (double)r->bytes / max_us / 1e3 : 0.0;
      r->busbw = r->algbw * 2.0 * (world - 1) / world;
      busbw_sum += r->busbw;
      char wrong[32];
      if (r->wrong >= 0) snprintf(wrong, sizeof wrong, "%lld", r->wrong);
      else snprintf(wrong, sizeof wrong, "N/A");
      printf("%13zu %13zu %9s %6s %14s %11.2f %10.3f %10.3f %7s\n", r->bytes, r->count, "float32", "sum",
             o.label_algo, r->time_us, r->algbw, r->busbw, wrong);
      fflush(stdout);
    }
  }

  if (g_rank == 0) {
    printf("# Out of bounds values : %lld %s\n", wrong_total, wrong_total ? "ERROR" : "OK");
    printf("# Avg bus bandwidth    : %g\n", nrows ? busbw_sum / (double)nrows : 0.0);
    printf("#\n");
    fflush(stdout);
  }

  int write_failed = 0;
  if (json != NULL && write_json(json, world, &o, rows, nrows) != 0) {
    fprintf(stderr, "ompi_allreduce: rank 0: writing '%s' failed\n", o.json_path);
    write_failed = 1;
  }
  CHECK_MPI(MPI_Bcast(&write_failed, 1, MPI_INT, 0, MPI_COMM_WORLD));
  free(rows);
  free(in);
  free(out);
  MPI_Finalize();
  if (write_failed) return EXIT_FAILURE_RT;
  return wrong_total ? EXIT_WRONG : EXIT_OK;
}
