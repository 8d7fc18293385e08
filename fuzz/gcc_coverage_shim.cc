// Coverage feedback for libFuzzer when the code under test is built with
// g++ (Debian's clang 14 cannot compile our C++23: its std::expected lacks
// conditionally trivial destructors).
//
// g++ offers -fsanitize-coverage=trace-pc (a call to __sanitizer_cov_trace_pc
// at every basic block) and trace-cmp (the __sanitizer_cov_trace_cmp* hooks,
// which libFuzzer implements itself). libFuzzer 14 wants 8-bit edge counters
// and its own __sanitizer_cov_trace_pc only aborts ("no longer supported"),
// so this shim defines the hook (linked first, with
// --allow-multiple-definition): it hashes each calling PC into a table of
// counters registered with libFuzzer as one module. Collisions only blur
// coverage a little (65536 slots for a few thousand blocks).
// Compile this file WITHOUT coverage instrumentation.
#include <cstddef>
#include <cstdint>

extern "C" void __sanitizer_cov_8bit_counters_init(uint8_t* start, uint8_t* stop);
extern "C" void __sanitizer_cov_pcs_init(const uintptr_t* pcs_beg, const uintptr_t* pcs_end);

namespace {
constexpr size_t kSlots = 1 << 16;  // power of two: the hash is masked
alignas(64) uint8_t counters[kSlots];
// libFuzzer pairs each counter with a (pc, flags) entry; ours are synthetic.
alignas(64) uintptr_t pcs[2 * kSlots];

struct Register {
  Register() {
    for (size_t i = 0; i < kSlots; ++i) {
      pcs[2 * i] = i + 1;
      pcs[2 * i + 1] = 0;
    }
    __sanitizer_cov_8bit_counters_init(counters, counters + kSlots);
    __sanitizer_cov_pcs_init(pcs, pcs + 2 * kSlots);
  }
} registered;
}  // namespace

extern "C" __attribute__((no_sanitize_address, no_sanitize_undefined)) void __sanitizer_cov_trace_pc() {
  auto pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  pc ^= pc >> 17;
  pc *= 0x9E3779B97F4A7C15ull;
  ++counters[(pc >> 48) & (kSlots - 1)];
}

// g++'s trace-cmp also reports floating-point comparisons, which libFuzzer
// has no hooks for: ignore them.
extern "C" void __sanitizer_cov_trace_cmpf(float, float) {}
extern "C" void __sanitizer_cov_trace_cmpd(double, double) {}
