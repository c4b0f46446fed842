"""What a physical device can do (features, extensions, properties), read through the structure
chains of vkGetPhysicalDeviceFeatures2 and vkGetPhysicalDeviceProperties2."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import vulkan as vk

from peakbench.backend import DeviceInfo

ffi = vk.ffi

# Structures newer than the `vulkan` package's headers, laid out by hand (Vulkan registry).
STYPE_BFLOAT16_FEATURES = 1000141000      # VkPhysicalDeviceShaderBfloat16FeaturesKHR
STYPE_FLOAT8_FEATURES = 1000567000        # VkPhysicalDeviceShaderFloat8FeaturesEXT
EXT_COOPMAT = "VK_KHR_cooperative_matrix"
EXT_COOPMAT2 = "VK_NV_cooperative_matrix2"
EXT_SHADER_CLOCK = "VK_KHR_shader_clock"
EXT_SM_BUILTINS = "VK_NV_shader_sm_builtins"     # gl_SMIDNV: the SM a workgroup runs on (sm.*)
EXT_ATOMIC_FLOAT = "VK_EXT_shader_atomic_float"
STYPE_COOPMAT2_FEATURES = 1000593000      # VkPhysicalDeviceCooperativeMatrix2FeaturesNV
STYPE_COOPMAT2_PROPERTIES = 1000593002    # VkPhysicalDeviceCooperativeMatrix2PropertiesNV
EXT_BFLOAT16 = "VK_KHR_shader_bfloat16"
EXT_FLOAT8 = "VK_EXT_shader_float8"
EXT_EXECUTABLE_PROPERTIES = "VK_KHR_pipeline_executable_properties"
EXT_SM_BUILTINS = "VK_NV_shader_sm_builtins"
EXT_AMD_CORE = "VK_AMD_shader_core_properties"
EXT_AMD_CORE2 = "VK_AMD_shader_core_properties2"

KINDS = {vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: "gpu",
         vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: "integrated",
         vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: "virtual",
         vk.VK_PHYSICAL_DEVICE_TYPE_CPU: "cpu"}


def _chain(*structs):
    """Link structures (cffi structs or _raw arrays) through pNext, first to last."""
    links = [ffi.cast("VkBaseOutStructure*", s) for s in structs]
    for a, b in zip(links, links[1:]):
        a.pNext = b
    return structs[0]


def _raw(stype: int, words: int):
    """A structure the `vulkan` package's headers predate, as 32-bit words: sType at word 0,
    pNext at words 2-3, the members (VkBool32 or uint32_t) from word 4."""
    s = ffi.new(f"uint32_t[{words}]")
    s[0] = stype
    return s


def _new(ctype: str, stype: int):
    s = ffi.new(ctype + "*")
    s.sType = stype
    return s


def _string(chars) -> str:
    """A C char array as str (the package's wrappers sometimes convert already)."""
    if isinstance(chars, str):
        return chars
    raw = chars if isinstance(chars, (bytes, bytearray)) else ffi.string(chars)
    return bytes(raw).decode(errors="replace")


def _version(v: int) -> str:
    return f"{v >> 22}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def _driver_version(vendor_id: int, v: int, info: str) -> str:
    if info:
        return info
    if vendor_id == 0x10DE:          # NVIDIA packs 10.8.8.6 bits
        return f"{v >> 22}.{(v >> 14) & 0xFF}.{(v >> 6) & 0xFF}"
    return _version(v)


@dataclass
class Capabilities:
    """What a physical device offers that decides which tests run."""
    extensions: set = field(default_factory=set)
    features: dict = field(default_factory=dict)     # name -> bool
    api_version: int = 0
    timestamp_period_ns: float = 1.0
    max_workgroup_size: int = 128                   # of a 1-D workgroup: size[0] and invocations
    max_workgroups: int = 65535                     # maxComputeWorkGroupCount[0]
    max_storage_buffer_range: int = 1 << 27
    subgroup_size: int = 32
    subgroup_arithmetic: bool = False               # subgroupAdd & co. in compute shaders
    units: int | None = None
    threads_per_unit: int | None = None
    dot_product: dict = field(default_factory=dict)  # integer dot product "accelerated" properties
    coopmat_shapes: list = field(default_factory=list)  # coopmat.Shape per reported combination
    coopmat2: dict = field(default_factory=dict)        # VK_NV_cooperative_matrix2 limits

    def has(self, feature: str) -> bool:
        return bool(self.features.get(feature))


def _optional(chain: list, extensions: set, extension: str, ctype: str, stype: int):
    """The structure `ctype`, appended to `chain`, where the device has `extension`; else None."""
    if extension not in extensions:
        return None
    s = _new(ctype, stype)
    chain.append(s)
    return s


def probe_features(pd, extensions: set) -> dict:
    f11 = _new("VkPhysicalDeviceVulkan11Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES)
    f12 = _new("VkPhysicalDeviceVulkan12Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES)
    f13 = _new("VkPhysicalDeviceVulkan13Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES)
    chain = [f11, f12, f13]
    # VkPhysicalDeviceShaderBfloat16FeaturesKHR (3 VkBool32), ...ShaderFloat8FeaturesEXT (2),
    # ...CooperativeMatrix2FeaturesNV (7).
    bf16 = _raw(STYPE_BFLOAT16_FEATURES, 8) if EXT_BFLOAT16 in extensions else None
    fp8 = _raw(STYPE_FLOAT8_FEATURES, 8) if EXT_FLOAT8 in extensions else None
    cm2 = _raw(STYPE_COOPMAT2_FEATURES, 12) if EXT_COOPMAT2 in extensions else None
    chain += [s for s in (bf16, fp8, cm2) if s is not None]
    coop = _optional(chain, extensions, EXT_COOPMAT, "VkPhysicalDeviceCooperativeMatrixFeaturesKHR",
                     vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR)
    clock = _optional(chain, extensions, EXT_SHADER_CLOCK, "VkPhysicalDeviceShaderClockFeaturesKHR",
                      vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR)
    sm = _optional(chain, extensions, EXT_SM_BUILTINS, "VkPhysicalDeviceShaderSMBuiltinsFeaturesNV",
                   vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_FEATURES_NV)
    exe = _optional(chain, extensions, EXT_EXECUTABLE_PROPERTIES, "VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR",
                    vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR)
    atomic_float = _optional(chain, extensions, EXT_ATOMIC_FLOAT, "VkPhysicalDeviceShaderAtomicFloatFeaturesEXT",
                             vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT)
    f2 = _new("VkPhysicalDeviceFeatures2", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2)
    _chain(f2, *chain)
    vk.vkGetPhysicalDeviceFeatures2(pd, f2)
    core = f2.features
    return {
        "shaderFloat64": core.shaderFloat64, "shaderInt64": core.shaderInt64,
        "shaderInt16": core.shaderInt16,
        "storageBuffer16BitAccess": f11.storageBuffer16BitAccess,
        "shaderFloat16": f12.shaderFloat16, "shaderInt8": f12.shaderInt8,
        "storageBuffer8BitAccess": f12.storageBuffer8BitAccess,
        "shaderIntegerDotProduct": f13.shaderIntegerDotProduct,
        "maintenance4": f13.maintenance4,   # glslang's SPIR-V 1.6 uses LocalSizeId
        "shaderBFloat16Type": bool(bf16 and bf16[4]), "shaderBFloat16DotProduct": bool(bf16 and bf16[5]),
        "shaderBFloat16CooperativeMatrix": bool(bf16 and bf16[6]),
        "pipelineExecutableInfo": bool(exe and exe.pipelineExecutableInfo),
        "shaderFloat8": bool(fp8 and fp8[4]), "shaderFloat8CooperativeMatrix": bool(fp8 and fp8[5]),
        "cooperativeMatrix": bool(coop and coop.cooperativeMatrix),
        "cooperativeMatrixWorkgroupScope": bool(cm2 and cm2[4]),
        "cooperativeMatrixFlexibleDimensions": bool(cm2 and cm2[5]),
        "vulkanMemoryModel": f12.vulkanMemoryModel,
        "vulkanMemoryModelDeviceScope": f12.vulkanMemoryModelDeviceScope,
        "bufferDeviceAddress": f12.bufferDeviceAddress,   # the pointer chase (mem_chase.comp)
        "shaderSubgroupClock": bool(clock and clock.shaderSubgroupClock),
        "shaderSMBuiltins": bool(sm and sm.shaderSMBuiltins),
        "shaderBufferFloat32AtomicAdd": bool(atomic_float and atomic_float.shaderBufferFloat32AtomicAdd),
        "shaderSharedFloat32AtomicAdd": bool(atomic_float and atomic_float.shaderSharedFloat32AtomicAdd),
    }


def probe(instance, pd, index: int) -> tuple[DeviceInfo, Capabilities]:
    extensions = {_string(e.extensionName) for e in vk.vkEnumerateDeviceExtensionProperties(pd, None)}
    driver = _new("VkPhysicalDeviceDriverProperties", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES)
    ids = _new("VkPhysicalDeviceIDProperties", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES)
    sub = _new("VkPhysicalDeviceSubgroupProperties", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES)
    dot = _new("VkPhysicalDeviceShaderIntegerDotProductProperties",
               vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES)
    chain = [driver, ids, sub, dot]
    cm2 = _raw(STYPE_COOPMAT2_PROPERTIES, 8) if EXT_COOPMAT2 in extensions else None   # 3 x uint32_t
    if cm2 is not None:
        chain.append(cm2)
    sm = _optional(chain, extensions, EXT_SM_BUILTINS, "VkPhysicalDeviceShaderSMBuiltinsPropertiesNV",
                   vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV)
    amd = _optional(chain, extensions, EXT_AMD_CORE, "VkPhysicalDeviceShaderCorePropertiesAMD",
                    vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD)
    amd2 = _optional(chain, extensions, EXT_AMD_CORE2, "VkPhysicalDeviceShaderCoreProperties2AMD",
                     vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_2_AMD)
    p2 = _new("VkPhysicalDeviceProperties2", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2)
    _chain(p2, *chain)
    vk.vkGetPhysicalDeviceProperties2(pd, p2)
    p = p2.properties
    kind = KINDS.get(p.deviceType, "other")
    caps = Capabilities(extensions=extensions, features=probe_features(pd, extensions),
                        api_version=p.apiVersion, timestamp_period_ns=p.limits.timestampPeriod,
                        max_workgroup_size=min(p.limits.maxComputeWorkGroupSize[0],
                                               p.limits.maxComputeWorkGroupInvocations),
                        max_workgroups=p.limits.maxComputeWorkGroupCount[0],
                        max_storage_buffer_range=p.limits.maxStorageBufferRange,
                        subgroup_size=sub.subgroupSize,
                        subgroup_arithmetic=bool(sub.supportedOperations & vk.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT
                                                 and sub.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT))
    if EXT_COOPMAT in extensions:
        from peakbench.vulkan.coopmat import query_flexible_shapes, query_shapes
        caps.coopmat_shapes = query_shapes(instance, pd)
        if cm2 is not None and caps.has("cooperativeMatrixWorkgroupScope"):
            caps.coopmat2 = {"max_workgroup_size": cm2[4], "max_dimension": cm2[5],
                             "reserved_shared_memory": cm2[6]}
            caps.coopmat_shapes += query_flexible_shapes(instance, pd)
    caps.dot_product = {
        "4x8BitPackedSignedAccelerated": bool(dot.integerDotProduct4x8BitPackedSignedAccelerated),
        "4x8BitPackedMixedSignednessAccelerated": bool(dot.integerDotProduct4x8BitPackedMixedSignednessAccelerated),
        "accumulatingSaturating4x8BitPackedSignedAccelerated":
            bool(dot.integerDotProductAccumulatingSaturating4x8BitPackedSignedAccelerated),
    }
    # Units and resident threads per unit, where the API reveals them; they size the grid.
    if sm is not None:
        caps.units, caps.threads_per_unit = sm.shaderSMCount, sm.shaderWarpsPerSM * caps.subgroup_size
    elif amd2 is not None and amd2.activeComputeUnitCount:
        caps.units = amd2.activeComputeUnitCount
        caps.threads_per_unit = amd.maxSimdWavesPerCu * amd.simdPerComputeUnit * amd.wavefrontSize \
            if amd is not None else None
    elif amd is not None:
        caps.units = amd.shaderEngineCount * amd.shaderArraysPerEngineCount * amd.computeUnitsPerShaderArray
    elif kind == "cpu":
        caps.units = os.cpu_count()
    uuid = bytes(ffi.buffer(ids.deviceUUID, 16)).hex()
    info = DeviceInfo(
        index=index, name=_string(p.deviceName), vendor_id=p.vendorID, device_id=p.deviceID,
        driver=_driver_version(p.vendorID, p.driverVersion, _string(driver.driverInfo)),
        api=_version(p.apiVersion), uuid=f"{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}",
        kind=kind, units=caps.units, extra={"driver_name": _string(driver.driverName)})
    return info, caps
