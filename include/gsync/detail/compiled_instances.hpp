#pragma once
/// \file
/// The allreduce instantiations that GSYNC_SEPARATE_COMPILATION compiles once, in the library,
/// for `tcp_communicator` and the automatic algorithm: one list, read twice. allreduce.hpp declares
/// them `extern template` in that mode, so a user's file that calls one of them does not generate
/// the seven schedules again (their compile time: benchmarks/results/from_code_comments.md);
/// gsync/impl/src.hpp instantiates them. Other types and operators, and forced algorithms, are
/// instantiated where they are called, as in the header-only mode.
///
/// `GSYNC_COMPILED_ALLREDUCE(F)` calls F(T, Op) for each (element type, operator) pair.

#define GSYNC_COMPILED_ALLREDUCE(F)                                                                        \
  F(float, ::gsync::op::sum) F(float, ::gsync::op::avg) F(float, ::gsync::op::max) F(float, ::gsync::op::min) \
  F(double, ::gsync::op::sum) F(double, ::gsync::op::avg)                                                  \
  F(::gsync::half, ::gsync::op::sum) F(::gsync::half, ::gsync::op::avg)                                    \
  F(::gsync::bfloat16, ::gsync::op::sum) F(::gsync::bfloat16, ::gsync::op::avg)                            \
  F(std::int32_t, ::gsync::op::sum) F(std::int64_t, ::gsync::op::sum)

/// The signature of one of them (the allreduce of ticket `tk` on a tcp_communicator, host memory).
#define GSYNC_ALLREDUCE_RUN_SIGNATURE(T, Op)                                                                   \
  void ::gsync::detail::allreduce_run<::gsync::algo::automatic, ::gsync::host_memory, ::gsync::transport::tcp, \
                                      T, Op>(                                                                  \
      ::gsync::communicator<::gsync::transport::tcp>&, ::gsync::op_ticket, const T*, T*, std::size_t, const Op&)
