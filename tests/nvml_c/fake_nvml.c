/*
 * A fake libnvidia-ml.so.1 for tests, built against NVIDIA's own nvml.h (the nvidia-nvml-dev
 * wheel), so that nvidia-ml-py's real ctypes code runs against the header's real structs.
 *
 * What it reports comes from the JSON scenario named by $GPUTOP_FAKE_NVML_SCENARIO (the format
 * is in tests/nvml_c/README.md). Every call is appended to $GPUTOP_FAKE_NVML_LOG, when set, as
 * "<device index or -> <function> <return code> <device's tick or ->".
 *
 * Build switches: -DOMIT_<function> leaves that symbol out of the library (an older driver);
 * -DWRONG_PROCESS_INFO_LAYOUT fills the process lists with nvmlProcessInfo_v1_t records where
 * the caller passed nvmlProcessInfo_v2_t ones (a test shows this is caught);
 * -DWRONG_MIG_PROCESS_IDS swaps the gpuInstanceId and computeInstanceId fields it writes.
 *
 * MIG: a device with a "mig" list has MIG mode on; each item is a MIG device (a compute
 * instance), reached by nvmlDeviceGetMigDeviceHandleByIndex at its position (null: no MIG
 * device at that index). A MIG handle is a `struct nvmlDevice_st` with a parent: it counts its
 * own calls, lives on its parent's tick, is lost with it, and fails as its own "errors" say.
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"

#define MAX_DEVICES 64
#define MAX_CALL_KINDS 64
#define MAX_MIG_DEVICES 8
#define NO_INSTANCE 0xFFFFFFFFu
#define DEFAULT_TICK_ON "nvmlDeviceGetUtilizationRates"

struct nvmlDevice_st {
    unsigned index;
    const json *spec;
    struct nvmlDevice_st *parent;  /* a MIG device's GPU; NULL for a GPU */
    const char *call_names[MAX_CALL_KINDS];
    unsigned call_counts[MAX_CALL_KINDS];
};

struct nvmlGpmSample_st {
    int device;             /* -1 until filled by nvmlGpmSampleGet */
    unsigned long long tick;
    int live;
};

static const json *scenario;
static struct nvmlDevice_st devices[MAX_DEVICES];
static struct nvmlDevice_st mig_devices[MAX_DEVICES][MAX_MIG_DEVICES];
static unsigned device_count;
static int init_count;
static const char *tick_on = DEFAULT_TICK_ON;

/* ------------------------------------------------------------------ the scenario */

static unsigned tick_of(struct nvmlDevice_st *dev);

static void log_call(int device, const char *function, nvmlReturn_t ret) {
    const char *path = getenv("GPUTOP_FAKE_NVML_LOG");
    if (!path || !*path) return;
    char line[160];
    int n = device < 0 ? snprintf(line, sizeof line, "- %s %d -\n", function, (int)ret)
                       : snprintf(line, sizeof line, "%d %s %d %u\n", device, function, (int)ret,
                                  tick_of(&devices[device]));
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return;
    if (write(fd, line, (size_t)n) < 0) { /* a log that cannot be written is no log */ }
    close(fd);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t size = 0, cap = 4096;
    char *text = malloc(cap);
    for (size_t got; text && (got = fread(text + size, 1, cap - size - 1, f)) > 0;) {
        size += got;
        if (cap - size < 2) text = realloc(text, cap *= 2);
    }
    fclose(f);
    if (text) text[size] = '\0';
    return text;
}

/* The scenario, parsed once; NULL (said why on stderr) when missing or not JSON. */
static const json *load_scenario(void) {
    if (scenario) return scenario;
    const char *path = getenv("GPUTOP_FAKE_NVML_SCENARIO");
    char error[200] = "";
    char *text = path ? read_file(path) : NULL;
    if (!text) {
        fprintf(stderr, "fake NVML: no scenario (GPUTOP_FAKE_NVML_SCENARIO=%s)\n",
                path ? path : "");
        return NULL;
    }
    scenario = json_parse(text, error, sizeof error);
    if (!scenario || scenario->type != J_OBJECT) {
        fprintf(stderr, "fake NVML: scenario %s is not a JSON object (%s)\n", path, error);
        scenario = NULL;
        return NULL;
    }
    const json *tick = json_get(scenario, "tick_on");
    if (tick && tick->type == J_STRING) tick_on = tick->string;
    const json *list = json_get(scenario, "devices");
    device_count = 0;
    for (int i = 0; list && i < list->count && i < MAX_DEVICES; i++) {
        devices[i].index = (unsigned)i;
        devices[i].spec = json_at(list, i);
        const json *mig = json_get(devices[i].spec, "mig");
        for (int k = 0; mig && mig->type == J_ARRAY && k < mig->count && k < MAX_MIG_DEVICES;
             k++) {
            mig_devices[i][k].index = (unsigned)k;
            mig_devices[i][k].parent = &devices[i];
            mig_devices[i][k].spec = json_at(mig, k)->type == J_OBJECT ? json_at(mig, k) : NULL;
        }
        device_count++;
    }
    return scenario;
}

static unsigned *call_counter(struct nvmlDevice_st *dev, const char *function) {
    int i = 0;
    for (; i < MAX_CALL_KINDS && dev->call_names[i]; i++)
        if (strcmp(dev->call_names[i], function) == 0) return &dev->call_counts[i];
    if (i == MAX_CALL_KINDS) return NULL;
    dev->call_names[i] = function;
    return &dev->call_counts[i];
}

/* The GPU a handle stands for: itself, or a MIG device's parent. */
static struct nvmlDevice_st *gpu_of(struct nvmlDevice_st *dev) {
    return dev->parent ? dev->parent : dev;
}

/* The device's tick: how many times `tick_on` was called on it before this tick, from 0
   (a MIG device's is its GPU's). */
static unsigned tick_of(struct nvmlDevice_st *dev) {
    dev = gpu_of(dev);
    unsigned *calls = call_counter(dev, tick_on);
    return calls && *calls > 0 ? *calls - 1 : 0;
}

/* A per-tick value: a list gives one item a tick (the last one repeats), anything else is it. */
static const json *at_tick(const json *value, unsigned tick) {
    if (!value || value->type != J_ARRAY || value->count == 0) return value;
    return value->items[tick < (unsigned)value->count ? (int)tick : value->count - 1];
}

static const json *field(struct nvmlDevice_st *dev, const char *key) {
    return at_tick(json_get(dev->spec, key), tick_of(dev));
}

static unsigned long long number(struct nvmlDevice_st *dev, const char *key,
                                 unsigned long long otherwise) {
    const json *v = field(dev, key);
    return v && (v->type == J_NUMBER || v->type == J_BOOL) ? (unsigned long long)v->number
                                                            : otherwise;
}

static const char *text(struct nvmlDevice_st *dev, const char *key, const char *otherwise) {
    const json *v = json_get(dev->spec, key);
    return v && v->type == J_STRING ? v->string : otherwise;
}

static int in_list(const json *list, unsigned tick) {
    for (int i = 0; list && i < list->count; i++)
        if (list->items[i]->type == J_NUMBER && (unsigned)list->items[i]->number == tick) return 1;
    return 0;
}

/* What the scenario makes `function` return on this device now: a number is always, an object
   {"code", "from_tick", "to_tick" (exclusive), "ticks": [...]} only on those ticks. */
static nvmlReturn_t scripted_error(struct nvmlDevice_st *dev, const char *function) {
    unsigned tick = tick_of(dev);
    const json *lost = json_get(gpu_of(dev)->spec, "lost_from_tick");
    if (lost && lost->type == J_NUMBER && tick >= (unsigned)lost->number)
        return NVML_ERROR_GPU_IS_LOST;
    if (dev->parent && !dev->spec) return NVML_ERROR_INVALID_ARGUMENT;  /* a handle gone */
    const json *rule = json_get(json_get(dev->spec, "errors"), function);
    if (!rule) return NVML_SUCCESS;
    if (rule->type == J_NUMBER) return (nvmlReturn_t)rule->number;
    const json *code = json_get(rule, "code");
    const json *from = json_get(rule, "from_tick");
    const json *to = json_get(rule, "to_tick");
    const json *ticks = json_get(rule, "ticks");
    if (!code || code->type != J_NUMBER) return NVML_SUCCESS;
    if (from && tick < (unsigned)from->number) return NVML_SUCCESS;
    if (to && tick >= (unsigned)to->number) return NVML_SUCCESS;
    if (ticks && !in_list(ticks, tick)) return NVML_SUCCESS;
    return (nvmlReturn_t)code->number;
}

static nvmlReturn_t done(int device, const char *function, nvmlReturn_t ret) {
    log_call(device, function, ret);
    return ret;
}

/* Whether `dev` is a handle this library gave out: a GPU's or a MIG device's. */
static int is_handle(nvmlDevice_t dev) {
    for (unsigned i = 0; dev && i < device_count; i++) {
        if (dev == &devices[i]) return 1;
        for (int k = 0; k < MAX_MIG_DEVICES; k++)
            if (dev == &mig_devices[i][k] && dev->parent) return 1;
    }
    return 0;
}

/* Every device call starts here: count it (the tick), then fail as the scenario says. */
static nvmlReturn_t enter(nvmlDevice_t dev, const char *function) {
    if (init_count <= 0) return NVML_ERROR_UNINITIALIZED;
    if (!is_handle(dev)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned *calls = call_counter(dev, function);
    if (calls) (*calls)++;
    return scripted_error(dev, function);
}

/* The index logged for a handle: its GPU's (-1 for a handle not given out). */
static int log_index(nvmlDevice_t dev) {
    return is_handle(dev) ? (int)gpu_of(dev)->index : -1;
}

#define DEVICE_CALL(dev)                                                     \
    do {                                                                     \
        nvmlReturn_t entered_ = enter((dev), __func__);                      \
        if (entered_ != NVML_SUCCESS) return done(log_index(dev), __func__, entered_); \
    } while (0)
#define DEVICE_DONE(dev, ret) done(log_index(dev), __func__, (ret))
/* What only a whole GPU answers: a MIG device is refused, as real drivers do. */
#define GPU_ONLY(dev) \
    do { if ((dev)->parent) return DEVICE_DONE((dev), NVML_ERROR_NOT_SUPPORTED); } while (0)

/* Whether the GPU has MIG mode on: a "mig" list, unless "mig_mode" says otherwise. */
static int mig_mode(struct nvmlDevice_st *dev) {
    const json *mode = json_get(dev->spec, "mig_mode");
    if (mode && mode->type == J_NUMBER) return mode->number != 0;
    const json *mig = json_get(dev->spec, "mig");
    return mig && mig->type == J_ARRAY;
}

static nvmlReturn_t copy_text(const char *value, char *out, unsigned length) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ init and the system */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (!load_scenario()) return done(-1, __func__, NVML_ERROR_UNKNOWN);
    const json *error = json_get(scenario, "init_error");
    if (error && error->type == J_NUMBER && error->number != 0)
        return done(-1, __func__, (nvmlReturn_t)error->number);
    init_count++;
    return done(-1, __func__, NVML_SUCCESS);
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    if (init_count <= 0) return done(-1, __func__, NVML_ERROR_UNINITIALIZED);
    init_count--;
    return done(-1, __func__, NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (init_count <= 0) return done(-1, __func__, NVML_ERROR_UNINITIALIZED);
    const json *v = json_get(scenario, "driver_version");
    return done(-1, __func__, copy_text(v && v->type == J_STRING ? v->string : "580.65.06",
                                        version, length));
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (init_count <= 0) return done(-1, __func__, NVML_ERROR_UNINITIALIZED);
    *count = device_count;
    return done(-1, __func__, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (init_count <= 0) return done(-1, __func__, NVML_ERROR_UNINITIALIZED);
    if (index >= device_count) return done(-1, __func__, NVML_ERROR_INVALID_ARGUMENT);
    nvmlReturn_t ret = enter(&devices[index], __func__);
    if (ret == NVML_SUCCESS) *device = &devices[index];
    return done((int)index, __func__, ret);
}

/* ------------------------------------------------------------------ device readings */

#define DEFAULT_NAME "NVIDIA H100 80GB HBM3"

/* A MIG device is named as drivers name it: "<GPU's name> MIG <profile>". */
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEVICE_CALL(device);
    if (!device->parent)
        return DEVICE_DONE(device, copy_text(text(device, "name", DEFAULT_NAME), name, length));
    char mig_name[256];
    snprintf(mig_name, sizeof mig_name, "%s MIG %s", text(device->parent, "name", DEFAULT_NAME),
             text(device, "profile", "1g.10gb"));
    return DEVICE_DONE(device, copy_text(mig_name, name, length));
}

/* A MIG device's UUID is "MIG-..." (its own "uuid", else one made from its GPU and slot). */
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEVICE_CALL(device);
    char made[80];
    snprintf(made, sizeof made, "MIG-00000000-0000-0000-%04x-%012x", device->parent
             ? device->parent->index : 0, device->index);
    return DEVICE_DONE(device, copy_text(text(device, "uuid", device->parent ? made
                                              : "GPU-00000000-0000-0000-0000-000000000000"),
                                         uuid, length));
}

/* Refused on a MIG device and on a GPU in MIG mode, as real drivers do. */
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    DEVICE_CALL(device);
    if (mig_mode(gpu_of(device))) return DEVICE_DONE(device, NVML_ERROR_NOT_SUPPORTED);
    utilization->gpu = (unsigned)number(device, "util", 50);
    utilization->memory = (unsigned)number(device, "memory_util", 20);
    return DEVICE_DONE(device, NVML_SUCCESS);
}

#define GIB (1ULL << 30)
#define MIB (1ULL << 20)

/* A MIG device's memory is its own: 10 GiB, none used, none reserved unless it says. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    DEVICE_CALL(device);
    int mig = device->parent != NULL;
    unsigned long long total = number(device, "memory_total", mig ? 10 * GIB : 80 * GIB);
    unsigned long long used = number(device, "memory_used", mig ? 0 : 10 * GIB);
    unsigned long long reserved = number(device, "memory_reserved", mig ? 0 : 512 * MIB);
    memory->total = total;
    memory->used = used + reserved;  /* v1 counts the driver's reserve as used */
    memory->free = total - used - reserved;
    return DEVICE_DONE(device, NVML_SUCCESS);
}

#ifndef OMIT_nvmlDeviceGetMemoryInfo_v2
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    DEVICE_CALL(device);
    if (memory->version != nvmlMemory_v2)
        return DEVICE_DONE(device, NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    int mig = device->parent != NULL;
    unsigned long long total = number(device, "memory_total", mig ? 10 * GIB : 80 * GIB);
    unsigned long long used = number(device, "memory_used", mig ? 0 : 10 * GIB);
    unsigned long long reserved = number(device, "memory_reserved", mig ? 0 : 512 * MIB);
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = total - used - reserved;
    return DEVICE_DONE(device, NVML_SUCCESS);
}
#endif

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                      unsigned int *temp) {
    DEVICE_CALL(device);
    GPU_ONLY(device);
    if (sensor != NVML_TEMPERATURE_GPU) return DEVICE_DONE(device, NVML_ERROR_INVALID_ARGUMENT);
    *temp = (unsigned)number(device, "temperature", 55);
    return DEVICE_DONE(device, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    DEVICE_CALL(device);
    GPU_ONLY(device);
    *power = (unsigned)number(device, "power_mw", 300000);
    return DEVICE_DONE(device, NVML_SUCCESS);
}

/* The N of the GPU's /dev/nvidiaN: its "minor_number", else its index. */
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    DEVICE_CALL(device);
    GPU_ONLY(device);
    *minorNumber = (unsigned)number(device, "minor_number", device->index);
    return DEVICE_DONE(device, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    DEVICE_CALL(device);
    GPU_ONLY(device);
    *limit = (unsigned)number(device, "power_limit_mw", 700000);
    return DEVICE_DONE(device, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                    unsigned int *clock) {
    DEVICE_CALL(device);
    GPU_ONLY(device);
    if (type == NVML_CLOCK_SM) *clock = (unsigned)number(device, "sm_clock", 1980);
    else if (type == NVML_CLOCK_MEM) *clock = (unsigned)number(device, "memory_clock", 2619);
    else return DEVICE_DONE(device, NVML_ERROR_NOT_SUPPORTED);
    return DEVICE_DONE(device, NVML_SUCCESS);
}

#ifndef OMIT_nvmlDeviceGetPcieThroughput
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter,
                                         unsigned int *value) {
    DEVICE_CALL(device);
    GPU_ONLY(device);
    if (counter == NVML_PCIE_UTIL_RX_BYTES) *value = (unsigned)number(device, "pcie_rx_kb", 1000);
    else if (counter == NVML_PCIE_UTIL_TX_BYTES) *value = (unsigned)number(device, "pcie_tx_kb", 500);
    else return DEVICE_DONE(device, NVML_ERROR_INVALID_ARGUMENT);
    return DEVICE_DONE(device, NVML_SUCCESS);
}
#endif

#ifndef OMIT_nvmlDeviceGetFieldValues
/* One value of a batch: the PCIe byte counters where the scenario has them, else refused. */
static void field_value(struct nvmlDevice_st *dev, nvmlFieldValue_t *value) {
    char id[16];
    snprintf(id, sizeof id, "%u", value->fieldId);
    const char *key = value->fieldId == NVML_FI_DEV_PCIE_COUNT_RX_BYTES ? "pcie_rx_bytes"
                      : value->fieldId == NVML_FI_DEV_PCIE_COUNT_TX_BYTES ? "pcie_tx_bytes"
                                                                          : NULL;
    const json *reading = key ? field(dev, key) : NULL;
    const json *error = at_tick(json_get(json_get(dev->spec, "field_errors"), id), tick_of(dev));
    const json *type = at_tick(json_get(json_get(dev->spec, "field_types"), id), tick_of(dev));
    value->timestamp = 1700000000000000LL + (long long)tick_of(dev) * 1000000LL;
    value->latencyUsec = 0;
    value->valueType = type && type->type == J_NUMBER ? (nvmlValueType_t)type->number
                                                      : NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    if (error && error->type == J_NUMBER) value->nvmlReturn = (nvmlReturn_t)error->number;
    else if (!reading || reading->type != J_NUMBER) value->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    else value->nvmlReturn = NVML_SUCCESS;
    if (value->nvmlReturn != NVML_SUCCESS) return;
    if (value->valueType == NVML_VALUE_TYPE_DOUBLE) value->value.dVal = reading->number;
    else value->value.ullVal = (unsigned long long)reading->number;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t *values) {
    DEVICE_CALL(device);
    GPU_ONLY(device);
    if (count < 0 || (count > 0 && !values))
        return DEVICE_DONE(device, NVML_ERROR_INVALID_ARGUMENT);
    for (int i = 0; i < count; i++) field_value(device, &values[i]);
    return DEVICE_DONE(device, NVML_SUCCESS);
}
#endif

/* ------------------------------------------------------------------ processes */

/* This tick's list: "processes" is a list of records, or a list of such lists, one a tick. */
static const json *tick_list(struct nvmlDevice_st *dev, const char *key) {
    const json *all = json_get(dev->spec, key);
    if (!all || all->type != J_ARRAY) return NULL;
    if (all->count > 0 && all->items[0]->type == J_ARRAY) return at_tick(all, tick_of(dev));
    return all;
}

static unsigned long long record_number(const json *record, const char *key,
                                        unsigned long long otherwise) {
    const json *v = json_get(record, key);
    if (v && v->type == J_NULL) return ULLONG_MAX;  /* NVML's "not available" */
    return v && v->type == J_NUMBER ? (unsigned long long)v->number : otherwise;
}

/* One process record, as the caller's struct version lays it out. */
static void fill_process(nvmlProcessInfo_v2_t *infos, unsigned i, const json *p, unsigned gi,
                         unsigned ci) {
#ifdef WRONG_PROCESS_INFO_LAYOUT
    nvmlProcessInfo_v1_t *wrong = (nvmlProcessInfo_v1_t *)infos;
    wrong[i].pid = (unsigned)record_number(p, "pid", 0);
    wrong[i].usedGpuMemory = record_number(p, "memory", 0);
    (void)gi;
    (void)ci;
#else
    infos[i].pid = (unsigned)record_number(p, "pid", 0);
    infos[i].usedGpuMemory = record_number(p, "memory", 0);
#ifdef WRONG_MIG_PROCESS_IDS
    infos[i].gpuInstanceId = ci;
    infos[i].computeInstanceId = gi;
#else
    infos[i].gpuInstanceId = gi;
    infos[i].computeInstanceId = ci;
#endif
#endif
}

/* A MIG device's GPU and compute instance ids ("gi", "ci"; NO_INSTANCE when absent). */
static unsigned instance_id(struct nvmlDevice_st *mig, const char *key) {
    return (unsigned)record_number(mig->spec, key, NO_INSTANCE);
}

/* The processes `dev` answers for: a MIG device its own, on its instance; a GPU its
   "processes" (their "gpu_instance"/"compute_instance" passed through) and, in MIG mode, every
   MIG device's too (the aggregate a privileged caller gets). */
static unsigned gather_processes(nvmlDevice_t dev, const json **records, unsigned *gis,
                                 unsigned *cis, unsigned room) {
    unsigned n = 0;
    struct nvmlDevice_st *sources[1 + MAX_MIG_DEVICES];
    unsigned count = 0;
    sources[count++] = dev;
    if (!dev->parent && mig_mode(dev))
        for (int k = 0; k < MAX_MIG_DEVICES; k++)
            if (mig_devices[dev->index][k].spec) sources[count++] = &mig_devices[dev->index][k];
    for (unsigned s = 0; s < count; s++) {
        const json *list = tick_list(sources[s], "processes");
        for (int i = 0; list && i < list->count && n < room; i++, n++) {
            records[n] = list->items[i];
            int mig = sources[s]->parent != NULL;
            gis[n] = mig ? instance_id(sources[s], "gi")
                         : (unsigned)record_number(records[n], "gpu_instance", NO_INSTANCE);
            cis[n] = mig ? instance_id(sources[s], "ci")
                         : (unsigned)record_number(records[n], "compute_instance", NO_INSTANCE);
        }
    }
    return n;
}

#define MAX_PROCESSES 256

static nvmlReturn_t running_processes(nvmlDevice_t dev, unsigned int *count,
                                      nvmlProcessInfo_v2_t *infos) {
    const json *records[MAX_PROCESSES];
    unsigned gis[MAX_PROCESSES], cis[MAX_PROCESSES];
    unsigned n = gather_processes(dev, records, gis, cis, MAX_PROCESSES);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (*count < n || !infos) {
        *count = n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) fill_process(infos, i, records[i], gis[i], cis[i]);
    *count = n;
    return NVML_SUCCESS;
}

#ifndef OMIT_nvmlDeviceGetComputeRunningProcesses_v3
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    DEVICE_CALL(device);
    return DEVICE_DONE(device, running_processes(device, count, infos));
}
#endif

#ifndef OMIT_nvmlDeviceGetComputeRunningProcesses_v2
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_v2_t *infos) {
    DEVICE_CALL(device);
    return DEVICE_DONE(device, running_processes(device, count, infos));
}
#endif

/* SM util samples newer than `last_seen`: "process_util" is a list of {"pid", "time", "sm",
   "memory"} (or a list of such lists, one a tick); none newer is NVML_ERROR_NOT_FOUND. */
#ifndef OMIT_nvmlDeviceGetProcessUtilization
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *samples,
                                             unsigned int *count,
                                             unsigned long long last_seen) {
    DEVICE_CALL(device);
    GPU_ONLY(device);
    if (mig_mode(device)) return DEVICE_DONE(device, NVML_ERROR_NOT_SUPPORTED);
    const json *list = tick_list(device, "process_util");
    unsigned n = 0;
    for (int i = 0; list && i < list->count; i++)
        if (record_number(list->items[i], "time", 0) > last_seen) n++;
    if (n == 0) return DEVICE_DONE(device, NVML_ERROR_NOT_FOUND);
    if (!samples || *count < n) {
        *count = n;
        return DEVICE_DONE(device, NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned k = 0;
    for (int i = 0; list && i < list->count; i++) {
        const json *s = list->items[i];
        if (record_number(s, "time", 0) <= last_seen) continue;
        samples[k].pid = (unsigned)record_number(s, "pid", 0);
        samples[k].timeStamp = record_number(s, "time", 0);
        samples[k].smUtil = (unsigned)record_number(s, "sm", 0);
        samples[k].memUtil = (unsigned)record_number(s, "memory", 0);
        samples[k].encUtil = samples[k].decUtil = 0;
        k++;
    }
    *count = n;
    return DEVICE_DONE(device, NVML_SUCCESS);
}
#endif

/* ------------------------------------------------------------------ MIG */

/* Current and pending mode of a GPU; a MIG device is no GPU (INVALID_ARGUMENT); a GPU without
   a "mig" list or "mig_mode" has no MIG at all (NOT_SUPPORTED, as consumer GPUs). */
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
                                  unsigned int *pending) {
    DEVICE_CALL(device);
    if (device->parent || !current || !pending)
        return DEVICE_DONE(device, NVML_ERROR_INVALID_ARGUMENT);
    if (!json_get(device->spec, "mig") && !json_get(device->spec, "mig_mode"))
        return DEVICE_DONE(device, NVML_ERROR_NOT_SUPPORTED);
    *current = *pending = mig_mode(device) ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return DEVICE_DONE(device, NVML_SUCCESS);
}

/* Seven on a GPU in MIG mode (an A100's or H100's), zero otherwise. */
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    DEVICE_CALL(device);
    if (device->parent || !count) return DEVICE_DONE(device, NVML_ERROR_INVALID_ARGUMENT);
    *count = mig_mode(device) ? 7 : 0;
    return DEVICE_DONE(device, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *mig) {
    DEVICE_CALL(device);
    if (device->parent || !mig) return DEVICE_DONE(device, NVML_ERROR_INVALID_ARGUMENT);
    if (!mig_mode(device)) return DEVICE_DONE(device, NVML_ERROR_NOT_SUPPORTED);
    if (index >= MAX_MIG_DEVICES || !mig_devices[device->index][index].spec)
        return DEVICE_DONE(device, NVML_ERROR_NOT_FOUND);
    *mig = &mig_devices[device->index][index];
    return DEVICE_DONE(device, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig) {
    DEVICE_CALL(device);
    if (!is_mig) return DEVICE_DONE(device, NVML_ERROR_INVALID_ARGUMENT);
    *is_mig = device->parent != NULL;
    return DEVICE_DONE(device, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEVICE_CALL(device);
    if (!device->parent || !id) return DEVICE_DONE(device, NVML_ERROR_INVALID_ARGUMENT);
    *id = instance_id(device, "gi");
    return DEVICE_DONE(device, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEVICE_CALL(device);
    if (!device->parent || !id) return DEVICE_DONE(device, NVML_ERROR_INVALID_ARGUMENT);
    *id = instance_id(device, "ci");
    return DEVICE_DONE(device, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *device) {
    DEVICE_CALL(mig);
    if (!mig->parent || !device) return DEVICE_DONE(mig, NVML_ERROR_INVALID_ARGUMENT);
    *device = mig->parent;
    return DEVICE_DONE(mig, NVML_SUCCESS);
}

/* ------------------------------------------------------------------ GPM (Hopper and later) */

#ifndef OMIT_nvmlGpmQueryDeviceSupport
nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    DEVICE_CALL(device);
    GPU_ONLY(device);
    if (support->version != NVML_GPM_SUPPORT_VERSION)
        return DEVICE_DONE(device, NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    support->isSupportedDevice = (unsigned)number(device, "gpm_supported", 0);
    return DEVICE_DONE(device, NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    if (init_count <= 0) return done(-1, __func__, NVML_ERROR_UNINITIALIZED);
    struct nvmlGpmSample_st *s = calloc(1, sizeof *s);
    if (!s) return done(-1, __func__, NVML_ERROR_MEMORY);
    s->device = -1;
    s->live = 1;
    *sample = s;
    return done(-1, __func__, NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    if (!sample || !sample->live) return done(-1, __func__, NVML_ERROR_INVALID_ARGUMENT);
    sample->live = 0;  /* kept allocated: a second free is caught, not a crash */
    return done(-1, __func__, NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    DEVICE_CALL(device);
    GPU_ONLY(device);
    if (!sample || !sample->live) return DEVICE_DONE(device, NVML_ERROR_INVALID_ARGUMENT);
    unsigned *calls = call_counter(device, __func__);
    sample->device = (int)(device - devices);
    sample->tick = calls ? *calls : 0;
    return DEVICE_DONE(device, NVML_SUCCESS);
}

/* Metrics between two samples of one device, the first older: values from "gpm", keyed by
   metric id (per tick allowed); a metric not there is NVML_ERROR_NOT_SUPPORTED. */
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *get) {
    if (init_count <= 0) return done(-1, __func__, NVML_ERROR_UNINITIALIZED);
    if (get->version != NVML_GPM_METRICS_GET_VERSION)
        return done(-1, __func__, NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    nvmlGpmSample_t a = get->sample1, b = get->sample2;
    if (!a || !b || !a->live || !b->live || a->device < 0 || a->device != b->device
        || a->tick >= b->tick || get->numMetrics > NVML_GPM_METRIC_MAX)
        return done(-1, __func__, NVML_ERROR_INVALID_ARGUMENT);
    struct nvmlDevice_st *dev = &devices[a->device];
    const json *values = json_get(dev->spec, "gpm");
    for (unsigned i = 0; i < get->numMetrics; i++) {
        char id[16];
        snprintf(id, sizeof id, "%u", get->metrics[i].metricId);
        const json *v = at_tick(json_get(values, id), tick_of(dev));
        get->metrics[i].metricInfo.shortName = NULL;
        get->metrics[i].metricInfo.longName = NULL;
        get->metrics[i].metricInfo.unit = NULL;
        if (v && v->type == J_NUMBER) {
            get->metrics[i].nvmlReturn = NVML_SUCCESS;
            get->metrics[i].value = v->number;
        } else {
            get->metrics[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return done(a->device, __func__, NVML_SUCCESS);
}
#endif
