#include "src/engine/stream_judge.h"

#include <algorithm>
#include <cstring>

namespace igt::engine {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string GhostId(uint64_t file, uint64_t index) {
  std::string id(16, '\0');
  std::memcpy(id.data(), &file, 8);
  std::memcpy(id.data() + 8, &index, 8);
  return id;
}

}  // namespace

StreamJudge::StreamJudge(Model m, ModuleFn own, std::shared_ptr<size_t> live)
    : m_(m), own_(static_cast<bool>(own)), live_(std::move(live)) {
  if (live_) ++*live_;
  for (int size : {kPiece, kWhole}) {
    ghosts_[Index(kLru, size)].module = std::move(*MakeEvictionPolicy("lru"));
    if (own_) ghosts_[Index(kOwn, size)].module = own();
  }
  const bool pieces = m_.piece_bytes > 0 && m_.piece_bytes < m_.unit_bytes;
  choice_ = Index(own_ ? kOwn : kLru, pieces ? kPiece : kWhole);
}

bool StreamJudge::Ghost::Touch(const std::string& id, uint64_t bytes, uint64_t now_us, double cap_bytes) {
  auto [it, fresh] = ids.try_emplace(id, bytes);
  if (!fresh) {
    module->OnAccessAt(id, now_us);
  } else {
    held_bytes += bytes;
    module->OnInsertUnit(id, bytes, 0, UnitMeta{.now_us = now_us});
  }
  // The share (sampled), and never more than kMaxGhostEntries ids.
  while (ids.size() > 1 && (static_cast<double>(held_bytes) > cap_bytes || ids.size() > kMaxGhostEntries)) {
    auto victim = module->PickVictim();
    if (!victim) break;
    module->OnRemove(*victim);
    auto v = ids.find(*victim);
    if (v == ids.end()) break;
    held_bytes -= v->second;
    ids.erase(v);
  }
  return !fresh;
}

void StreamJudge::OnRead(uint64_t now_us, uint64_t file, uint64_t offset, uint64_t length, uint64_t file_size,
                         uint64_t share_bytes) {
  const uint64_t U = m_.unit_bytes;
  const bool pieces = m_.piece_bytes > 0 && m_.piece_bytes < U;
  // A file of one unit is fetched whole either way: its pieces are its unit.
  const uint64_t P = pieces && file_size > U ? m_.piece_bytes : U;
  if (length == 0 || offset >= file_size) return;
  const uint64_t end = std::min(file_size, offset + length);
  // Sampled: about kMaxEntries of the piece ghost's ids hold the share, at
  // the size of the ids it holds (pieces, or files smaller than a piece).
  const Ghost& held = ghosts_[Index(kLru, pieces ? kPiece : kWhole)];
  const double entry_bytes = held.ids.empty() ? static_cast<double>(pieces ? m_.piece_bytes : U)
                                              : static_cast<double>(held.held_bytes) / static_cast<double>(held.ids.size());
  const double share = static_cast<double>(std::max(share_bytes, U));
  const double rate = std::min(1.0, static_cast<double>(kMaxEntries) * entry_bytes / share);
  const double cap_bytes = share * rate;
  const double per_byte_us = 1e6 / m_.bandwidth_bytes_per_s;
  const int modules = own_ ? 2 : 1;
  for (uint64_t u = offset / U; u <= (end - 1) / U; ++u) {
    if (rate < 1.0 && static_cast<double>(Mix(file ^ Mix(u)) >> 11) * 0x1p-53 >= rate) continue;
    const uint64_t ustart = u * U, uend = std::min(file_size, ustart + U);
    const uint64_t lo = std::max(offset, ustart), hi = std::min(end, uend);
    for (int mod = 0; mod < modules; ++mod) {
      Ghost& whole = ghosts_[Index(mod, kWhole)];
      if (!whole.Touch(GhostId(file, u), uend - ustart, now_us, cap_bytes))
        whole.cost_us += m_.latency_us + static_cast<double>(uend - ustart) * per_byte_us;
      if (!pieces) continue;
      Ghost& piece = ghosts_[Index(mod, kPiece)];
      uint64_t missed = 0;  // one GET for the read's missing pieces in the unit
      for (uint64_t p = lo / P; p <= (hi - 1) / P; ++p) {
        const uint64_t bytes = std::min(uend, (p + 1) * P) - p * P;
        if (!piece.Touch(GhostId(file, p), bytes, now_us, cap_bytes)) missed += bytes;
      }
      if (missed > 0) piece.cost_us += m_.latency_us + static_cast<double>(missed) * per_byte_us;
    }
    if (++since_halving_ >= kHalfLife) {
      since_halving_ = 0;
      Decide(pieces);
      for (auto& g : ghosts_) g.cost_us /= 2;
    }
  }
}

void StreamJudge::Decide(bool pieces) {
  const auto cost = [&](int mod, int size) { return ghosts_[Index(mod, size)].cost_us; };
  // `a` beats `b`: by a fraction, and by more misses than noise. Each
  // change rebuilds the stream's module (lfu's counts start again): on a
  // stable Zipf with the share near the file's size, a few misses either
  // way flipped it 20 times (a review's sim, 529 -> 615 MiB).
  const double noise = kNoiseMisses * m_.latency_us;
  const auto beats = [&](double a, double b) { return a < kHysteresis * b && b - a > noise; };
  const int lru_size = pieces && cost(kLru, kPiece) <= cost(kLru, kWhole) ? kPiece : kWhole;
  size_t want = choice_;
  if (own_) {
    // lru in place of the own module only when it beats the own module at
    // both piece sizes; the own module with pieces again when it beats lru.
    const double own = pieces ? std::min(cost(kOwn, kPiece), cost(kOwn, kWhole)) : cost(kOwn, kWhole);
    if (want / 2 == kOwn && beats(cost(kLru, lru_size), own))
      want = Index(kLru, lru_size);
    else if (want / 2 == kLru && beats(own, cost(kLru, static_cast<int>(want % 2))))
      want = Index(kOwn, pieces ? kPiece : kWhole);
  }
  // Under lru, the cheaper piece size.
  if (pieces && want / 2 == kLru) {
    const int other = 1 - static_cast<int>(want % 2);
    if (beats(cost(kLru, other), cost(kLru, static_cast<int>(want % 2)))) want = Index(kLru, other);
  }
  // A change once two halvings in a row want it: the same module (its
  // size is the one wanted now: lru's two sizes costing about the same must
  // not hold the module back), or under lru the same size.
  const bool module_change = want / 2 != choice_ / 2;
  const bool again = wanted_ != SIZE_MAX && (module_change ? wanted_ / 2 == want / 2 : wanted_ == want);
  if (want == choice_) {
    wanted_ = SIZE_MAX;
  } else if (!again) {
    wanted_ = want;
  } else {
    choice_ = want;
    wanted_ = SIZE_MAX;
  }
}

}  // namespace igt::engine
