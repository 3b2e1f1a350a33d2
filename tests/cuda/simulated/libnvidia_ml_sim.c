/*
 * A simulated libnvidia-ml for running the real pynvml (nvidia-ml-py) without a GPU.
 *
 * Two GPUs without MIG, H100-like. Only the entry points accelkit-cuda reaches through
 * pynvml exist; everything else is absent, as on a driver that lacks it. Built twice by the
 * tests: with -DWITH_V3_PROCESSES (a driver from 510 on) and without it, where pynvml's
 * unversioned nvmlDeviceGetComputeRunningProcesses raises NVMLLibraryMismatchError.
 * NVML_SIM_PID / NVML_SIM_PID_BYTES name one compute process on GPU 0.
 *
 * Health: both GPUs support XID-critical and double-bit ECC events. NVML_SIM_XID=<gpu>:<xid>
 * makes the first nvmlEventSetWait_v2 on a set registered for that GPU's XIDs return that XID;
 * every other wait sleeps its timeout and answers NVML_ERROR_TIMEOUT. The recovery-action
 * field (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 230) exists in the -DWITH_V3_PROCESSES build
 * (a newer driver), NVML_SIM_RECOVERY=<gpu>:<action> setting one GPU's; the older build
 * answers the field NOT_SUPPORTED in its own nvmlReturn.
 *
 * Identity: both GPUs tell a board part number and a VBIOS version; GPU 0 a serial, GPU 1
 * none (NOT_SUPPORTED, as a GeForce board). Topology: the GPUs are on two NUMA nodes
 * (nvmlDeviceGetTopologyCommonAncestor: SYSTEM); the -DWITH_V3_PROCESSES build (a newer
 * driver, an NVLink board) joins them with links 0 and 1 (link 2 is down, links from 3 on
 * do not exist: INVALID_ARGUMENT); the older build has no NVLink entry points.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
enum {
    SUCCESS = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3,
    INSUFFICIENT_SIZE = 7, TIMEOUT = 10,
};

typedef struct { int index; } device_t;
typedef device_t *nvmlDevice_t;

typedef struct { unsigned long long total, free, used; } memory_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_t;
typedef struct { unsigned int gpu, memory; } utilization_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} process_t;

static device_t devices[2] = {{0}, {1}};
static int initialized;

static int valid(nvmlDevice_t d) { return initialized && (d == &devices[0] || d == &devices[1]); }

static nvmlReturn_t put(char *buffer, unsigned int length, const char *value) {
    if (strlen(value) + 1 > length) return INSUFFICIENT_SIZE;
    strcpy(buffer, value);
    return SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; initialized = 1; return SUCCESS; }
nvmlReturn_t nvmlInit_v2(void) { initialized = 1; return SUCCESS; }
nvmlReturn_t nvmlShutdown(void) {
    if (!initialized) return UNINITIALIZED;
    initialized = 0;
    return SUCCESS;
}
const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NOT_SUPPORTED: return "Not Supported";
    case UNINITIALIZED: return "Uninitialized";
    case TIMEOUT: return "Timeout";
    default: return "Unknown Error";
    }
}
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    return initialized ? put(version, length, "550.54.15") : UNINITIALIZED;
}
nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    return initialized ? put(version, length, "12.550.54.15") : UNINITIALIZED;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    if (!initialized) return UNINITIALIZED;
    *version = 12040;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized) return UNINITIALIZED;
    *count = 2;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized) return UNINITIALIZED;
    if (index > 1) return INVALID_ARGUMENT;
    *device = &devices[index];
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    return valid(d) ? put(name, length, "NVIDIA H100 80GB HBM3") : INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    char value[64];
    if (!valid(d)) return INVALID_ARGUMENT;
    snprintf(value, sizeof value, "GPU-5d0c%04d-1111-2222-3333-444455556666", d->index);
    return put(uuid, length, value);
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, memory_t *memory) {
    if (!valid(d)) return INVALID_ARGUMENT;
    memory->total = 85520809984ULL;
    memory->used = d->index == 0 ? 4294967296ULL : 0;
    memory->free = memory->total - memory->used;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, pci_t *pci) {
    if (!valid(d)) return INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", 0x3B + d->index);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", 0x3B + d->index);
    pci->bus = 0x3B + d->index;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *serial, unsigned int length) {
    if (!valid(d)) return INVALID_ARGUMENT;
    return d->index == 0 ? put(serial, length, "1654922001234") : NOT_SUPPORTED;
}
nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t d, char *part, unsigned int length) {
    if (!valid(d)) return INVALID_ARGUMENT;
    return put(part, length, "692-2G520-0200-000");
}
nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t d, char *version, unsigned int length) {
    if (!valid(d)) return INVALID_ARGUMENT;
    return put(version, length, "96.00.74.00.11");
}
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int *level) {
    if (!valid(a) || !valid(b)) return INVALID_ARGUMENT;
    *level = a == b ? 0 : 50; /* NVML_TOPOLOGY_INTERNAL, NVML_TOPOLOGY_SYSTEM */
    return SUCCESS;
}
#ifdef WITH_V3_PROCESSES
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, unsigned int *active) {
    if (!valid(d) || link > 2) return INVALID_ARGUMENT;
    *active = link < 2;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, pci_t *pci) {
    if (!valid(d) || link > 2) return INVALID_ARGUMENT;
    return nvmlDeviceGetPciInfo_v3(&devices[1 - d->index], pci);
}
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, int *type) {
    if (!valid(d) || link > 2) return INVALID_ARGUMENT;
    *type = 0; /* NVML_NVLINK_DEVICE_TYPE_GPU */
    return SUCCESS;
}
#endif
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *node) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *node = d->index;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *minor = d->index;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t d, unsigned int *cores) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *cores = 16896;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *major = 9;
    *minor = 0;
    return SUCCESS;
}
/* supported on MIG device handles only */
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, void *attributes) {
    (void)attributes;
    return valid(d) ? NOT_SUPPORTED : INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    (void)current; (void)pending;
    return valid(d) ? NOT_SUPPORTED : INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, utilization_t *utilization) {
    if (!valid(d)) return INVALID_ARGUMENT;
    utilization->gpu = 37;
    utilization->memory = 12;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *power = 123456;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *limit) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *limit = 700000;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *temperature) {
    if (!valid(d) || sensor != 0) return INVALID_ARGUMENT;
    *temperature = 41 + d->index;
    return SUCCESS;
}

static nvmlReturn_t processes(nvmlDevice_t d, unsigned int *count, process_t *infos) {
    const char *pid = getenv("NVML_SIM_PID");
    const char *bytes = getenv("NVML_SIM_PID_BYTES");
    unsigned int found = (pid != NULL && d == &devices[0]) ? 1 : 0;
    if (!valid(d)) return INVALID_ARGUMENT;
    if (*count < found) {
        *count = found;
        return INSUFFICIENT_SIZE;
    }
    *count = found;
    if (found) {
        infos[0].pid = (unsigned int)strtoul(pid, NULL, 10);
        infos[0].usedGpuMemory = bytes ? strtoull(bytes, NULL, 10) : 0;
        infos[0].gpuInstanceId = 0xFFFFFFFF;
        infos[0].computeInstanceId = 0xFFFFFFFF;
    }
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count,
                                                     process_t *infos) {
    return processes(d, count, infos);
}
#ifdef WITH_V3_PROCESSES
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                     process_t *infos) {
    return processes(d, count, infos);
}
#endif

/* -- health --------------------------------------------------------------------------- */
enum { EVENT_DOUBLE_BIT_ECC = 0x2, EVENT_XID = 0x8, RECOVERY_ACTION_FIELD = 230 };

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} event_data_t;
typedef struct { unsigned long long registered[2]; int delivered, freed; } event_set_t;
typedef union {
    double dVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal;
    long long sllVal; int siVal; unsigned short usVal;
} value_t;
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    value_t value;
} field_value_t;

static event_set_t event_sets[4];
static int event_set_count;

/* "<gpu>:<value>" from the environment; 0 when unset or for another GPU */
static int pair(const char *name, int gpu, unsigned long *value) {
    const char *text = getenv(name);
    char *rest;
    if (text == NULL || strtol(text, &rest, 10) != gpu || *rest != ':') return 0;
    *value = strtoul(rest + 1, NULL, 10);
    return 1;
}

nvmlReturn_t nvmlEventSetCreate(event_set_t **set) {
    if (!initialized) return UNINITIALIZED;
    if (event_set_count == 4) return INSUFFICIENT_SIZE;
    *set = &event_sets[event_set_count++];
    memset(*set, 0, sizeof **set);
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    if (!valid(d)) return INVALID_ARGUMENT;
    *types = EVENT_DOUBLE_BIT_ECC | EVENT_XID;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types,
                                      event_set_t *set) {
    if (!valid(d) || set == NULL || set->freed) return INVALID_ARGUMENT;
    if (types & ~(unsigned long long)(EVENT_DOUBLE_BIT_ECC | EVENT_XID)) return NOT_SUPPORTED;
    set->registered[d->index] |= types;
    return SUCCESS;
}
nvmlReturn_t nvmlEventSetWait_v2(event_set_t *set, event_data_t *data, unsigned int timeoutms) {
    struct timespec pause = {timeoutms / 1000, (long)(timeoutms % 1000) * 1000000L};
    unsigned long xid;
    if (!initialized) return UNINITIALIZED;
    if (set == NULL || set->freed || data == NULL) return INVALID_ARGUMENT;
    for (int gpu = 0; gpu < 2; gpu++) {
        if (!set->delivered && (set->registered[gpu] & EVENT_XID) && pair("NVML_SIM_XID", gpu, &xid)) {
            set->delivered = 1;
            data->device = &devices[gpu];
            data->eventType = EVENT_XID;
            data->eventData = xid;
            data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFF;
            return SUCCESS;
        }
    }
    nanosleep(&pause, NULL);
    return TIMEOUT;
}
nvmlReturn_t nvmlEventSetFree(event_set_t *set) {
    if (set == NULL || set->freed) return INVALID_ARGUMENT;
    set->freed = 1;
    return SUCCESS;
}
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, field_value_t *values) {
    unsigned long action;
    if (!valid(d) || values == NULL) return INVALID_ARGUMENT;
    for (int i = 0; i < count; i++) {
        values[i].valueType = 1; /* unsigned int */
        values[i].value.ullVal = 0;
        values[i].nvmlReturn = NOT_SUPPORTED;
#ifdef WITH_V3_PROCESSES
        if (values[i].fieldId == RECOVERY_ACTION_FIELD) {
            values[i].nvmlReturn = SUCCESS;
            values[i].value.uiVal = pair("NVML_SIM_RECOVERY", d->index, &action) ? action : 0;
        }
#else
        (void)action;
#endif
    }
    return SUCCESS;
}
