#version 450
// launch.overhead: an empty dispatch; what is timed is submit to fence, not the kernel.
layout(local_size_x = 1) in;
void main() {}
