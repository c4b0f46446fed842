#version 450
// launch.overhead: an empty dispatch; what is timed is submit to fence, not the kernel.
// With SPIN (workloads/launch.py's completion check): one invocation steps a 32-bit LCG
// `iterations` times, x = x * 1664525 + 1013904223 from x = 1, and stores x, a dispatch the GPU
// timer can time against the host's submit-to-fence time of the same dispatch.
layout(local_size_x = 1) in;
#if defined(SPIN) && SPIN
layout(std430, binding = 0) buffer Out { uint words[]; };
layout(push_constant) uniform Push { uint iterations; } push;
#endif
void main() {
#if defined(SPIN) && SPIN
    uint x = 1u;
    for (uint i = 0u; i < push.iterations; i++) x = x * 1664525u + 1013904223u;
    words[0] = x;
#endif
}
