// A file of an engine that runs collectives on a communicator made elsewhere: in the header-only
// mode it must not compile the set-up code (tests/given_no_setup.sh checks its object's symbols).
#include <gsync/allreduce.hpp>

#include <span>

void step(gsync::tcp_communicator& comm, std::span<float> grads) { gsync::allreduce(comm, grads, gsync::op::avg{}); }
