// Hand-written AVX-512 ceilings for the schedule lab (see handwritten.cpp): the kernels' _argv
// convention, f32 rows x d with d a multiple of 16.
#pragma once

namespace normgen::bench::lab {

int hand_rms_norm(void **args);              // ordinary stores
int hand_rms_norm_nt(void **args);           // non-temporal stores
int hand_rms_norm_nt_prefetch(void **args);  // + prefetch of the next row in the map loop
// Software-pipelined: the first statistics pass of row i + 1 runs in the map loop of row i
// (tasks of 2^18 elements so the pipeline is long).
int hand_rms_norm_nt_pipelined(void **args);
int hand_layer_norm_nt_pipelined(void **args);
// ... with one-pass shifted statistics (sum and sum of squares of x - k) fused into the map loop.
int hand_layer_norm_nt_pipelined_one_pass(void **args);
int hand_layer_norm(void **args);
int hand_layer_norm_nt(void **args);
int hand_layer_norm_nt_prefetch(void **args);

}  // namespace normgen::bench::lab
