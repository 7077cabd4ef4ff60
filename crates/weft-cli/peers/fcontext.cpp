// fcontext.cpp: the Boost.Context peer for `weft bench fibers` (row "switch",
// impl "boost-fcontext"): a ping-pong over boost::context::detail's
// jump_fcontext/make_fcontext, the bare assembly context switch under
// Boost.Context's callcc/fiber, i.e. the fastest thing Boost offers.
//
// build.rs compiles this file (C++, -O2) and links libboost_context only when
// Boost.Context is installed (Debian: libboost-context-dev); it then sets the
// `weft_have_boost` cfg so that src/bench/peers.rs declares the function.
// Same conventions as peers.c: time only the loop, with CLOCK_MONOTONIC.

#include <boost/context/detail/fcontext.hpp>

#include <cstdint>
#include <time.h>

namespace ctx = boost::context::detail;

namespace {

constexpr std::size_t kStackSize = 64 * 1024;
alignas(64) unsigned char pong_stack[kStackSize];

std::uint64_t now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return std::uint64_t(ts.tv_sec) * 1000000000u + std::uint64_t(ts.tv_nsec);
}

// Bounce straight back to whoever jumped here, forever. The context is
// abandoned (never unwound) when the batch ends; its stack is static.
void pong(ctx::transfer_t t)
{
    for (;;)
        t = ctx::jump_fcontext(t.fctx, nullptr);
}

} // namespace

// `round_trips` round trips = 2 * round_trips context switches.
extern "C" int peer_fcontext_pingpong(std::uint64_t round_trips, std::uint64_t *elapsed_ns)
{
    ctx::fcontext_t peer = ctx::make_fcontext(pong_stack + kStackSize, kStackSize, pong);
    if (peer == nullptr)
        return 22; // EINVAL
    // Enter pong once so that the timed loop only resumes it.
    peer = ctx::jump_fcontext(peer, nullptr).fctx;

    std::uint64_t t0 = now_ns();
    for (std::uint64_t i = 0; i < round_trips; i++)
        peer = ctx::jump_fcontext(peer, nullptr).fctx;
    *elapsed_ns = now_ns() - t0;
    return 0;
}
