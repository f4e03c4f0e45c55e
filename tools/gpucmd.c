/* gpucmd.c - `ctxshard gpu`: what the GPU path sees on this machine, and a
 * run of the GPU loader over a dataset (mode chosen, upload, samples/s
 * delivered to the device, and with --check every batch read back and
 * compared with the CPU gather). */
#include "gpucmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "ctxshard_gpu.h"
#include "cxs_convert.h"
#include "util.h"

static const char *mode_name(uint32_t m) {
    static const char *n[] = {"auto", "stream", "resident", "pool"};
    return m < 4 ? n[m] : "?";
}

static void print_probe(int32_t dev, const cxs_gpu_probe_info *p, int json) {
    if (json) {
        printf("{\"device\": %d, \"usable\": %s, \"built_with_cuda\": %s, \"name\": ", dev,
               p->usable ? "true" : "false", p->built_with_cuda ? "true" : "false");
        json_print_string(p->name, strlen(p->name));
        printf(", \"compute_capability\": \"%d.%d\", \"total_bytes\": %llu, \"free_bytes\": %llu, "
               "\"runtime_version\": %d, \"driver_version\": %d, \"register_read_only\": %s, "
               "\"gds\": %s, \"reason\": ",
               p->compute_major, p->compute_minor, (unsigned long long)p->total_bytes,
               (unsigned long long)p->free_bytes, p->runtime_version, p->driver_version,
               p->register_read_only ? "true" : "false", p->gds ? "true" : "false");
        json_print_string(p->reason, strlen(p->reason));
        printf("}\n");
        return;
    }
    printf("GPU path      %s\n", p->built_with_cuda ? "built with CUDA" : "built without CUDA");
    if (dev == CXS_GPU_EMULATE)
        printf("device        host emulation\n");
    else if (p->usable)
        printf("device        %d: %s, compute %d.%d, %.1f GiB (%.1f GiB free)\n", dev, p->name,
               p->compute_major, p->compute_minor, p->total_bytes / 1073741824.0,
               p->free_bytes / 1073741824.0);
    if (p->runtime_version && !p->driver_version)
        printf("CUDA          runtime %d.%d, no NVIDIA driver found\n", p->runtime_version / 1000,
               p->runtime_version % 1000 / 10);
    else if (p->runtime_version)
        printf("CUDA          runtime %d.%d, driver %d.%d\n", p->runtime_version / 1000,
               p->runtime_version % 1000 / 10, p->driver_version / 1000,
               p->driver_version % 1000 / 10);
    if (p->usable)
        printf("fast paths    read-only host registration %s, GPUDirect Storage %s\n",
               p->register_read_only ? "yes" : "no", p->gds ? "libcufile found" : "no libcufile");
    else
        printf("not usable    %s\n", p->reason);
}

int gpu_cmd_run(const char *dir, const gpu_cmd_opts *o) {
    cxs_gpu_probe_info pi;
    int prc = cxs_gpu_probe(o->device, &pi);
    if (!dir || prc) {
        print_probe(o->device, &pi, o->json);
        return prc ? EXIT_SYSTEM : 0;
    }
    cxs_dataset *ds;
    int rc = open_dataset(dir, NULL, &ds);
    if (rc) return rc;
    cxs_diag d = {0};
    cxs_info in;
    cxs_dataset_info(ds, &in);
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = o->seed, .world_size = 1};
    cxs_sampler *s = NULL;
    cxs_gpu_loader *l = NULL;
    float *ref = NULL, *got = NULL;
    uint16_t *got16 = NULL;
    int64_t *yref = NULL, *ygot = NULL;
    int ec = 0;
    if ((rc = cxs_sampler_create_ex(ds, &so, &s, &d))) {
        warnx_("%s: cannot create the sampler: %s", dir, d.message[0] ? d.message : cxs_strerror(rc));
        ec = exit_code_for(rc);
        goto out;
    }
    cxs_gpu_opts go;
    memset(&go, 0, sizeof go);
    go.device = o->device, go.mode = o->mode, go.budget_bytes = o->budget;
    go.k = o->k, go.batch_size = o->batch, go.threads = o->threads;
    go.flags = o->normalize ? CXS_GATHER_NORMALIZE : 0;
    go.out_dtype = o->bf16 ? CXS_GPU_OUT_BF16 : CXS_GPU_OUT_F32;
    go.labels = in.label_width ? 1 : 0;
    double t0 = now_seconds();
    if ((rc = cxs_gpu_loader_create(ds, s, &go, 0, 0, &l, &d))) {
        warnx_("%s: %s", dir, d.message[0] ? d.message : cxs_strerror(rc));
        /* options that do not fit (budget, mode) are the caller's to change */
        ec = rc == CXS_E_RANGE || rc == CXS_E_INVALID ? EXIT_USAGE
             : rc == CXS_E_DEVICE || rc == CXS_E_UNSUPPORTED || (rc < 0 && rc > -4096) ? EXIT_SYSTEM
                                                                                       : exit_code_for(rc);
        goto out;
    }
    double t_create = now_seconds() - t0;
    cxs_gpu_loader_info li;
    cxs_gpu_loader_describe(l, &li);
    const size_t W = (2 * (size_t)o->k + 1) * in.dim;
    if (o->check &&
        (!(ref = malloc(o->batch * W * 4)) || !(got = malloc(o->batch * W * 4)) ||
         !(got16 = malloc(o->batch * W * 2)) || !(yref = malloc(o->batch * 8)) ||
         !(ygot = malloc(o->batch * 8)))) {
        warnx_("out of memory");
        ec = EXIT_SYSTEM;
        goto out;
    }
    uint64_t samples = 0, batches = 0, epoch = 0;
    const cxs_gpu_batch *b = NULL, *last = NULL;
    double start = now_seconds();
    while (o->batches ? batches < o->batches : epoch == 0) {
        if ((rc = cxs_gpu_loader_next(l, NULL, &b))) {
            warnx_("%s: %s", dir, cxs_gpu_loader_error(l)->message);
            ec = EXIT_SYSTEM;
            goto out;
        }
        if (!b) {
            if ((rc = cxs_gpu_loader_reset(l, ++epoch, 0))) break;
            continue;
        }
        if (o->check) {
            d.message[0] = 0;
            if ((rc = cxs_dataset_gather_ex(ds, b->frames, b->n, o->k, go.flags, NULL, 0, ref,
                                            go.labels ? yref : NULL, &d)) ||
                (rc = cxs_gpu_loader_download(l, NULL, b->x, o->bf16 ? (void *)got16 : (void *)got,
                                              b->n * W * (o->bf16 ? 2 : 4))) ||
                (go.labels && (rc = cxs_gpu_loader_download(l, NULL, b->y, ygot, b->n * 8)))) {
                warnx_("%s: %s", dir, rc == CXS_E_DEVICE ? cxs_gpu_loader_error(l)->message
                                      : d.message[0]         ? d.message
                                                             : cxs_strerror(rc));
                ec = exit_code_for(rc);
                goto out;
            }
            for (size_t i = 0; i < b->n * W; i++)
                if (o->bf16 ? got16[i] != cxs_to_bf16(ref[i]) : memcmp(&got[i], &ref[i], 4) != 0) {
                    fprintf(stderr, "%s: batch %llu: the window of frame %llu differs from the CPU "
                            "gather at element %zu\n", dir, (unsigned long long)b->index,
                            (unsigned long long)b->frames[i / W], i % W);
                    ec = EXIT_DATA;
                    goto out;
                }
            if (go.labels && memcmp(ygot, yref, b->n * 8) != 0) {
                fprintf(stderr, "%s: batch %llu: labels differ from the CPU gather\n", dir,
                        (unsigned long long)b->index);
                ec = EXIT_DATA;
                goto out;
            }
        }
        samples += b->n;
        batches++;
        last = b;
    }
    if (last) { /* the device has finished the last batch when one byte of it arrives */
        char one;
        if (cxs_gpu_loader_download(l, NULL, last->x, &one, 1)) {
            warnx_("%s: %s", dir, cxs_gpu_loader_error(l)->message);
            ec = EXIT_SYSTEM;
            goto out;
        }
    }
    double dt = now_seconds() - start;
    cxs_gpu_loader_describe(l, &li);
    static const char *paths[] = {"pinned staging", "registered mapping",
                                  "cuFile (GPUDirect Storage, or its compatibility mode)"};
    if (o->json) {
        printf("{\"dataset\": ");
        json_print_string(dir, strlen(dir));
        printf(", \"mode\": \"%s\", \"reason\": ", mode_name(li.mode));
        json_print_string(li.reason, strlen(li.reason));
        printf(", \"upload_path\": \"%s\", \"device_bytes\": %llu, \"uploaded_bytes\": %llu, "
               "\"create_seconds\": %.6f, \"upload_seconds\": %.6f, \"k\": %u, \"batch\": %u, "
               "\"batches\": %llu, \"samples\": %llu, \"seconds\": %.6f, "
               "\"samples_per_second\": %.1f, \"checked\": %s}\n",
               paths[li.upload_path % 3], (unsigned long long)li.device_bytes,
               (unsigned long long)li.uploaded_bytes, t_create, li.upload_seconds, o->k, o->batch,
               (unsigned long long)batches, (unsigned long long)samples, dt, samples / dt,
               o->check ? "true" : "false");
    } else {
        print_probe(o->device, &pi, 0);
        printf("mode          %s (%s)\n", mode_name(li.mode), li.reason);
        if (li.mode != CXS_GPU_STREAM)
            printf("upload        %s, %.3f s; %.1f MiB on the device\n", paths[li.upload_path % 3],
                   li.upload_seconds, li.device_bytes / 1048576.0);
        printf("served        %llu batches of %u (k=%u), %llu samples in %.3f s: %.0f samples/s, "
               "%.2f GB/s of windows\n",
               (unsigned long long)batches, o->batch, o->k, (unsigned long long)samples, dt,
               samples / dt, samples * (double)W * (o->bf16 ? 2 : 4) / dt / 1e9);
        if (o->check) printf("checked       every window and label equals the CPU gather\n");
    }
out:
    free(ref);
    free(got);
    free(got16);
    free(yref);
    free(ygot);
    cxs_gpu_loader_free(l);
    cxs_sampler_free(s);
    cxs_dataset_close(ds);
    return ec;
}
