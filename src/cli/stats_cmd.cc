// `igtcache stats MOUNTPOINT [--json] [--watch]`: the live counters of a
// mount as a readable table on a terminal, as JSON with --json or whenever
// stdout is not a terminal (scripts and the test suite parse it).
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "fuse/fuse_fs.h"
#include "igtcache/config.h"
#include "src/cli/ops_cmds.h"

namespace igt {
namespace {

uint64_t U(const nlohmann::json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_number() ? it->get<uint64_t>() : 0;
}
// A key at the top level or under "engine" (the policy engine's counters).
const nlohmann::json* Find(const nlohmann::json& j, const char* k) {
  if (auto it = j.find(k); it != j.end() && it->is_number()) return &*it;
  if (auto e = j.find("engine"); e != j.end() && e->is_object())
    if (auto it = e->find(k); it != e->end() && it->is_number()) return &*it;
  return nullptr;
}
std::string Pct(double num, double den) { return den > 0 ? fmt::format("{:.1f}%", 100.0 * num / den) : "-"; }
std::string Dur(uint64_t s) {
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}
std::string Rate(uint64_t now, uint64_t before, double dt) {
  if (dt <= 0 || now < before) return "";
  return fmt::format(" ({}/s)", FormatSize(static_cast<uint64_t>(static_cast<double>(now - before) / dt)));
}

// Per-stream figures: the tree's streams (path, pattern) joined with the
// policy engine's (key, cached_bytes, hit_bytes, read_bytes) when the mount
// reports them; "-" where a figure is not reported.
struct Row {
  std::string path, label, gran, samples, cached, hit;
  std::optional<uint64_t> cached_bytes;  // as reported, for the choice of rows
};
std::vector<Row> StreamRows(const nlohmann::json& j, bool* root_seen = nullptr) {
  std::map<std::string, const nlohmann::json*> eng;
  if (auto e = j.find("engine"); e != j.end() && e->is_object())
    if (auto s = e->find("streams"); s != e->end() && s->is_array())
      for (const auto& x : *s)
        for (const char* k : {"stream", "key"})  // ToJson(EngineStats) names it "stream"
          if (x.is_object() && x.contains(k) && x[k].is_string()) {
            eng[x[k].get<std::string>()] = &x;
            break;
          }
  auto bytes_of = [](const nlohmann::json& x, Row& row) {
    if (auto c = x.find("cached_bytes"); c != x.end() && c->is_number()) {
      row.cached_bytes = c->get<uint64_t>();
      row.cached = FormatSize(*row.cached_bytes);
    }
    if (auto r = x.find("hit_ratio"); r != x.end() && r->is_number()) {
      row.hit = fmt::format("{:.1f}%", 100.0 * r->get<double>());
    } else if (x.contains("hit_bytes") && x.contains("read_bytes") && x["read_bytes"].is_number() &&
               x["hit_bytes"].is_number()) {
      row.hit = Pct(x["hit_bytes"].get<double>(), x["read_bytes"].get<double>());
    }
  };
  std::vector<Row> rows;
  std::set<std::string> seen;
  if (auto s = j.find("streams"); s != j.end() && s->is_array()) {
    for (const auto& x : *s) {
      if (!x.is_object()) continue;
      Row r;
      r.path = x.value("path", std::string("?"));
      if (r.path.empty()) r.path = "/";
      // The root's label mixes every job on the mount; the engine uses it
      // only for the files at the root itself, as the stream "/"
      // (POLICIES.md): shown otherwise, it read as a verdict on the whole
      // mount.
      if (r.path == "/" && !eng.count("/")) {
        if (root_seen) *root_seen = true;
        continue;
      }
      r.label = x.contains("label") ? x.value("label", std::string("?")) : x.value("pattern", std::string("?"));
      r.gran = x.value("granularity", std::string("-"));
      r.samples = x.contains("samples") && x["samples"].is_number() ? std::to_string(x["samples"].get<uint64_t>()) : "-";
      r.cached = r.hit = "-";
      bytes_of(x, r);
      if (auto e = eng.find(r.path); e != eng.end()) {
        bytes_of(*e->second, r);
        seen.insert(r.path);
      }
      rows.push_back(std::move(r));
    }
  }
  for (const auto& [key, x] : eng) {  // engine-only streams (e.g. "?dir/" while unlabelled)
    if (seen.count(key)) continue;
    Row r{key, x->contains("label") ? x->value("label", std::string("?")) : x->value("pattern", std::string("?")),
          "-", "-", "-", "-", std::nullopt};
    bytes_of(*x, r);
    rows.push_back(std::move(r));
  }
  return rows;
}

// --watch redraws the screen: the table fits the terminal, rows under the
// summary (14 lines with the "every" line and the cursor's) and columns.
struct Fit {
  size_t rows = SIZE_MAX, cols = SIZE_MAX;
};
Fit TerminalFit() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0) return {};
  Fit f;
  // A size with columns only (rows 0: `stty cols 40` in a new pty) still
  // cuts the lines.
  if (ws.ws_row > 0) f.rows = ws.ws_row > 17 ? ws.ws_row - 16 : 1;
  if (ws.ws_col > 0) f.cols = ws.ws_col;
  return f;
}

// Not the first byte of a UTF-8 character: text is cut before or after it.
bool Utf8Continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Every line cut to `cols` bytes (at a UTF-8 character's start): a line the
// terminal wrapped would push the redrawn screen past its last row, and the
// top lines (the summary) would scroll away.
std::string CutLines(const std::string& text, size_t cols) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    size_t n = end - start;
    if (n > cols) {
      n = cols;
      while (n > 0 && Utf8Continuation(text[start + n])) --n;
    }
    out.append(text, start, n);
    if (end < text.size()) out += '\n';
    start = end + 1;
  }
  return out;
}

int PrintOnce(const std::string& mnt, bool json) {
  if (json) {  // byte-for-byte what the mount serves (within kStatsWaitS, as ReadStats)
    const std::string path = NormalizeMountpoint(mnt) + "/" + kStatsFileName;
    auto text = RunWithin(
        [&] {
          std::ifstream in(path);
          if (!in) return std::string("E");
          std::stringstream ss;
          ss << in.rdbuf();
          return "K" + ss.str();
        },
        kStatsWaitS);
    if (text && text->starts_with("K")) {
      std::cout << text->substr(1);
      return kExitOk;
    }
    if (!text) {  // (an open that failed: ReadStats below says why)
      std::fprintf(stderr, "igtcache: error: igtcache mount point '%s' does not answer within %.0f s (its daemon "
                   "stopped or hung?)\n", mnt.c_str(), kStatsWaitS);
      return kExitError;
    }
  }
  auto j = ReadStats(mnt);
  if (!j) {
    igt::PrintError(j.error().message());
    // A path that is no mount is the command line's (as warm's).
    return j.error().code() == Code::kNotFound ? kExitUsage : kExitError;
  }
  std::cout << StatsTable(*j, nullptr, 0);  // whole: the terminal scrolls back
  return kExitOk;
}

}  // namespace

std::string StatsTable(const nlohmann::json& j, const nlohmann::json* prev, double dt, size_t max_stream_rows,
                       size_t max_cols) {
  std::string o;
  // Values may hold names from the bucket or the policy file: control
  // characters are escaped (a key's newline or escape sequence must not
  // forge a line or drive the terminal).
  auto line = [&o](const std::string& k, const std::string& v) { o += fmt::format("{:<10} {}\n", k, Escaped(v)); };
  o += fmt::format("igtcache {}  {}  pid {}  up {}\n\n", j.value("version", std::string("?")),
                   Escaped(j.value("source", std::string("?"))), U(j, "pid"), Dur(U(j, "uptime_s")));
  const uint64_t used = U(j, "cache_used_bytes"), limit = U(j, "cache_limit_bytes");
  const uint64_t inline_units = U(j, "cache_inline_units");
  line("cache", fmt::format("{} of {} ({}), {} units{}", FormatSize(used), FormatSize(limit),
                            Pct(static_cast<double>(used), static_cast<double>(limit)), U(j, "cache_units"),
                            inline_units ? fmt::format(" ({} inline)", inline_units) : std::string()));
  const uint64_t hb = U(j, "cache_hit_bytes"), mb = U(j, "cache_miss_bytes");
  const uint64_t hu = U(j, "cache_hit_units"), mu = U(j, "cache_miss_units");
  line("reads", fmt::format("{} requests, {}{}, {} opens", U(j, "read_requests"), FormatSize(U(j, "read_bytes")),
                            prev ? Rate(U(j, "read_bytes"), U(*prev, "read_bytes"), dt) : "", U(j, "opens")));
  line("hit ratio", fmt::format("{} of bytes ({} hit, {} missed), {} of units",
                                Pct(static_cast<double>(hb), static_cast<double>(hb + mb)), FormatSize(hb),
                                FormatSize(mb), Pct(static_cast<double>(hu), static_cast<double>(hu + mu))));
  // Bytes fetched per byte read: the figure to compare policies by (the hit
  // ratio counts prefetched bytes as hits, and prefetching fetches them too).
  const uint64_t read_bytes = U(j, "read_bytes"), got = U(j, "backend_get_bytes");
  line("backend", fmt::format("{} GETs {}{}{}, {} LISTs, {} HEADs, {} retries",
                              U(j, "backend_get_requests"), FormatSize(got),
                              read_bytes > 0 ? fmt::format(" ({:.2f}x the bytes read)", double(got) / double(read_bytes))
                                             : "",
                              prev ? Rate(got, U(*prev, "backend_get_bytes"), dt) : "",
                              U(j, "backend_list_requests"), U(j, "backend_head_requests"),
                              U(j, "backend_retries")));
  if (const uint64_t hidden = U(j, "hidden_names"); hidden != 0)
    line("names", fmt::format("{} hidden: names unsafe for a file system, taken by a directory, or listed outside their directory (the log names them)", hidden));
  if (U(j, "cache_dir_gone") != 0)
    line("cache", "DIR DELETED under the mount: nothing is cached; reads go to the source. Unmount and mount again");
  else if (U(j, "cache_index_broken") != 0)
    line("cache", "INDEX NOT WRITABLE after a failed write (the log says why): cached units are served, nothing new is "
                  "cached until it recovers; a remount recovers it");
  const uint64_t expiry = U(j, "credentials_expiry_unix_s"), failed = U(j, "credentials_renew_failures");
  const std::string fails =
      failed ? fmt::format(", {} renewals failed since the mount (the log says why)", failed) : "";
  if (expiry == 0 && failed)  // keys that do not expire, read again after S3 refused them
    line("credentials", fmt::format("S3 refused them and {} reading them again failed (the log says why)", failed));
  if (expiry != 0) {
    // The daemon runs on this machine: its clock is ours.
    const int64_t left = static_cast<int64_t>(expiry) - static_cast<int64_t>(std::time(nullptr));
    if (left <= 0)
      line("credentials", fmt::format("EXPIRED {} ago and not renewed{}: S3 refuses requests until they are "
                                      "(an SSO session may need 'aws sso login')",
                                      Dur(static_cast<uint64_t>(-left)), fails));
    else
      line("credentials", fmt::format("temporary, expire in {}, renewed 5 min ahead{}", Dur(static_cast<uint64_t>(left)), fails));
  }
  if (U(j, "backend_outage") != 0)
    line("source", "NOT ANSWERING for a whole retry budget: one short attempt per request (uncached reads fail "
                   "with EIO) until it answers again");
  if (const auto* pb = Find(j, "prefetch_bytes")) {
    const auto* pw = Find(j, "prefetch_wasted_bytes");
    const auto* ph = Find(j, "prefetch_hit_bytes");
    // "wasted" alone read as "all of it used" while most of it sat in the
    // cache unread (a checkpoint read at scattered offsets): what is neither
    // read nor evicted is said too.
    const uint64_t fetched = pb->get<uint64_t>(), used = ph ? ph->get<uint64_t>() : 0,
                   evicted = pw ? pw->get<uint64_t>() : 0;
    const uint64_t unread = fetched - std::min(fetched, used + evicted);
    line("prefetch", fmt::format("{} fetched ahead, {} used, {} removed unread (wasted){}", FormatSize(fetched),
                                 ph ? FormatSize(used) : "-", pw ? FormatSize(evicted) : "-",
                                 ph && pw ? fmt::format(", {} cached not read yet", FormatSize(unread)) : ""));
  }
  line("evictions", fmt::format("{} units, {}", U(j, "evictions"), FormatSize(U(j, "evicted_bytes"))));
  line("errors", fmt::format("read {}, backend {}, cache write {}, cache read {}, corrupt units {}",
                             U(j, "read_errors"), U(j, "backend_errors"), U(j, "cache_write_errors"),
                             U(j, "cache_read_errors"), U(j, "cache_corruptions")));
  // The policy in force (a user can see that a profile took) and, if the
  // latest SIGHUP reload failed, that the old one is kept, as the log says.
  if (auto e = j.find("engine"); e != j.end() && e->is_object()) {
    const std::string profile = e->value("profile", std::string());
    const uint64_t reloads = U(*e, "policy_reloads");
    line("policy", fmt::format("{}{}{}", e->value("policy", std::string("?")),
                               profile.empty() ? "" : ", profile " + profile,
                               reloads == 1 ? ", reloaded once"
                               : reloads   ? fmt::format(", reloaded {} times", reloads)
                                           : ""));
    if (const std::string err = e->value("policy_reload_error", std::string()); !err.empty())
      line("policy", fmt::format("the last reload failed ({} failed in all), the old policy is in use: {}",
                                 U(*e, "policy_reload_failures"), err));
  }
  // The policy file's overrides, as in effect: a user can see that a pin,
  // quota or never_cache took.
  if (auto e = j.find("engine"); e != j.end() && e->is_object())
    if (auto ovs = e->find("overrides"); ovs != e->end() && ovs->is_array())
      for (const auto& o : *ovs) {
        if (!o.is_object()) continue;
        std::vector<std::string> what;
        if (o.value("pin", false)) what.push_back("pinned");
        if (o.value("never_cache", false)) what.push_back("never cached");
        if (const uint64_t q = U(o, "quota_bytes"); q > 0) what.push_back("quota " + FormatSize(q));
        if (o.contains("pattern") && o["pattern"].is_string()) what.push_back("forced " + o["pattern"].get<std::string>());
        std::string desc;
        for (const auto& w : what) desc += (desc.empty() ? "" : ", ") + w;
        const std::string prefix = o.value("prefix", std::string());
        line("override", fmt::format("{}: {}{}", prefix.empty() ? "(everything)" : prefix,
                                     desc.empty() ? "no setting" : desc,
                                     o.value("never_cache", false) ? ""
                                                                   : fmt::format(" ({} cached)", FormatSize(U(o, "cached_bytes")))));
        // A line more above the table: one stream row less fits (--watch).
        if (max_stream_rows != SIZE_MAX && max_stream_rows > 1) --max_stream_rows;
      }
  bool root_only = false;
  auto rows = StreamRows(j, &root_only);
  // Unlabelled streams that hold nothing ("?dir/" a reader passed through)
  // and the engine's holding streams once empty (`(warm)` after its units
  // were read) say nothing: left out of the table (not of the JSON).
  std::erase_if(rows, [](const Row& r) {
    const bool holding = r.path == "(warm)" || r.path == "(readahead)" || r.path == "(scan)";
    return !r.path.empty() && (r.path[0] == '?' || holding) && r.cached_bytes && *r.cached_bytes == 0;
  });
  size_t more = 0;
  if (rows.size() > max_stream_rows) {
    // The streams holding the most are kept, in their order.
    std::vector<size_t> order(rows.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return rows[a].cached_bytes.value_or(0) > rows[b].cached_bytes.value_or(0);
    });
    std::vector<bool> keep(rows.size(), false);
    for (size_t i = 0; i < max_stream_rows; ++i) keep[order[i]] = true;
    std::vector<Row> kept;
    for (size_t i = 0; i < rows.size(); ++i)
      if (keep[i]) kept.push_back(std::move(rows[i]));
    more = rows.size() - kept.size();
    rows = std::move(kept);
  }
  o += "\n";
  // The other columns take 52 characters: the path column is narrowed
  // (its start cut off, to 10 characters at least) so that a row fits
  // max_cols when that is 62 or more.
  constexpr size_t kOtherCols = 52, kMaxPath = 60, kMinPath = 10;
  const size_t max_path = max_cols > kOtherCols + kMinPath ? std::min(kMaxPath, max_cols - kOtherCols) : kMinPath;
  size_t w = 6;
  for (auto& r : rows) {
    r.path = Escaped(r.path);  // as shown
    w = std::max(w, std::min<size_t>(r.path.size(), max_path));
  }
  o += fmt::format("{:<{}}  {:<10}  {:<5}  {:>8}  {:>10}  {:>9}\n", "STREAM", w, "LABEL", "GRAN", "SAMPLES",
                   "CACHED", "HIT RATIO");
  if (rows.empty() && more == 0)
    o += root_only ? "(only the mount's root, which mixes every job and is not used: files in directories "
                     "form streams)\n"
                   : "(none detected yet: a stream needs a few dozen reads)\n";
  for (const auto& r : rows) {
    std::string p = r.path;
    if (p.size() > max_path) {  // its start cut off, at a UTF-8 character's start
      size_t from = p.size() - (max_path - 3);
      while (from < p.size() && Utf8Continuation(p[from])) ++from;
      p = "..." + p.substr(from);
    }
    if (p.empty()) p = "/";
    o += fmt::format("{:<{}}  {:<10}  {:<5}  {:>8}  {:>10}  {:>9}\n", p, w, r.label, r.gran, r.samples, r.cached,
                     r.hit);
  }
  if (more) o += fmt::format("... and {} more streams (igtcache stats --json lists them all)\n", more);
  return max_cols == SIZE_MAX ? o : CutLines(o, max_cols);
}

int RunStats(const StatsArgs& a) {
  const bool json = a.json || !isatty(STDOUT_FILENO);
  if (!a.watch) return PrintOnce(a.mountpoint, json);
  const double dt = a.interval_s > 0.05 ? a.interval_s : 0.05;
  std::optional<nlohmann::json> prev;
  auto last = std::chrono::steady_clock::now();
  while (true) {
    auto j = ReadStats(a.mountpoint);
    if (!j) {
      igt::PrintError(j.error().message());
      // A path that is no mount is the command line's; a mount gone while
      // watched is not.
      return !prev && j.error().code() == Code::kNotFound ? kExitUsage : kExitError;
    }
    auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - last).count();
    last = now;
    if (json) {
      std::cout << j->dump() << std::endl;  // one object per line
    } else {
      const Fit fit = TerminalFit();
      std::cout << "\033[H\033[2J" << StatsTable(*j, prev ? &*prev : nullptr, elapsed, fit.rows, fit.cols)
                << fmt::format("\n(every {:.1f}s; Ctrl-C to stop)\n", dt) << std::flush;
    }
    prev = std::move(*j);
    std::this_thread::sleep_for(std::chrono::duration<double>(dt));
  }
}

}  // namespace igt
