"""Readers of the machine code a kernel ran, and the census of its main loop that the guards hold
against the catalog: SASS from cubins and from NVIDIA's Vulkan shader cache (sass, nvidia_cache,
sass_rules), AMDGPU assembly from LLVM (amdgpu), SPIR-V (spirv), and the listing tools they share
(listing). No GPU API here: backends hand these modules bytes and text, and import them; nothing
here imports a backend."""
