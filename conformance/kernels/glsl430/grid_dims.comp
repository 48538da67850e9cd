#version 430
// the first thread of the first block writes out[0..2] = the blocks per axis, that of the last block out[3..5]
layout(std430, binding = 0) writeonly buffer Out { uint data[]; } out_;

void main() {
    if (gl_LocalInvocationID != uvec3(0)) return;
    uvec3 n = gl_NumWorkGroups, b = gl_WorkGroupID;
    if (b == uvec3(0)) { out_.data[0] = n.x; out_.data[1] = n.y; out_.data[2] = n.z; }
    if (b == n - uvec3(1)) { out_.data[3] = n.x; out_.data[4] = n.y; out_.data[5] = n.z; }
}
