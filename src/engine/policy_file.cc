// Policy YAML parsing and profiles (policy_file.h). yaml-cpp exceptions are
// caught here and turned into errors naming the key.

#include "src/engine/policy_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <set>

#include "igtcache/config.h"
#include "src/config/yaml_keys.h"

namespace igt::engine {

namespace {
// Why no object key could start with `prefix` (relative to the mount root,
// leading '/' removed), or nullopt. Keys as the mount names them have no
// empty, "." or ".." components. ('*', '?' and '[' are legal in keys and
// file names, and taken literally.)
std::optional<std::string> UnmatchablePrefix(std::string_view prefix) {
  size_t pos = 0;
  while (pos < prefix.size()) {
    const size_t slash = prefix.find('/', pos);
    const std::string_view comp = prefix.substr(pos, slash == std::string_view::npos ? slash : slash - pos);
    if (comp.empty()) return "has an empty component ('//'): no path has one";
    if (comp == "." || comp == "..")
      return "has a '" + std::string(comp) + "' component: prefixes are plain paths from the mount root, "
             "not resolved";
    if (slash == std::string_view::npos) break;
    pos = slash + 1;
  }
  return std::nullopt;
}
}  // namespace

namespace {

PolicyFile Training() {
  PolicyFile f;
  f.profile = "training";
  f.patterns[kSequentialIdx] = {{"adaptive-readahead", {}}, {"evict-behind", {}}};
  f.patterns[kRandomIdx] = {{"epoch", {}}, {"keep", {}}};
  // Skewed: counts halve every minute, so yesterday's hot set gives way.
  f.patterns[kSkewedIdx] = {{"none", {}}, {"lfu", {{"half_life_ms", 60000}}}};
  f.patterns[kUnknownIdx] = {{"readahead", {{"units", 2}}}, {"lru", {}}};
  return f;
}

}  // namespace

std::vector<std::string> PolicyProfileNames() {
  return {"training", "serving", "preprocessing", "checkpoint-loading"};
}

Result<PolicyFile> PolicyProfile(const std::string& name) {
  PolicyFile f = Training();
  if (name == "training") return f;
  f.profile = name;
  if (name == "serving") {
    // Inference: popularity drifts slowly; keep heat for 10 minutes; no
    // epoch prefetching (requests are not epochs).
    f.patterns[kSkewedIdx].eviction = {"lfu", {{"half_life_ms", 600000}}};
    f.patterns[kRandomIdx].prefetch = {"epoch", {{"per_read", 0}}};
    return f;
  }
  if (name == "preprocessing") {
    // Listing-order scans of many files: the window runs on into more of the
    // following files (64 instead of 16).
    f.patterns[kSequentialIdx].prefetch = {"adaptive-readahead", {{"max_units", 64}, {"next_files", 64}}};
    return f;
  }
  if (name == "checkpoint-loading") {
    // Few very large files read front to back, often by several ranks.
    f.patterns[kSequentialIdx].prefetch = {"adaptive-readahead", {{"initial_units", 4}, {"max_units", 128}}};
    f.patterns[kUnknownIdx].prefetch = {"readahead", {{"units", 8}}};
    return f;
  }
  std::string known;
  for (const auto& n : PolicyProfileNames()) known += (known.empty() ? "" : ", ") + n;
  return Err(Status::InvalidArgument("unknown profile '" + name + "' (known: " + known + ")"));
}

Status PolicyFile::Validate(const std::string& origin) const {
  for (size_t i = 0; i < patterns.size(); ++i) {
    const std::string base = origin + ": patterns." + kPatternNames[i];
    if (auto p = MakePrefetchPolicy(patterns[i].prefetch.name, patterns[i].prefetch.params); !p)
      return Status::InvalidArgument(base + ".prefetch: " + p.error().message());
    if (auto e = MakeEvictionPolicy(patterns[i].eviction.name, patterns[i].eviction.params); !e)
      return Status::InvalidArgument(base + ".eviction: " + e.error().message());
  }
  if (allocation_period_ms == 0 || allocation_period_ms > kMaxAllocationPeriodMs)
    return Status::InvalidArgument(origin + ": allocation.period_ms: must be from 1 to " +
                                   std::to_string(kMaxAllocationPeriodMs));
  if (!(hysteresis >= 0 && hysteresis < 10))
    return Status::InvalidArgument(origin + ": allocation.hysteresis: must be in [0, 10)");
  return Status::Ok();
}

namespace {

struct Ctx {
  std::string origin;
  // "ORIGIN: line N: KEY: WHAT", N the line of `at` (the bad value, or the
  // mapping missing a key); without it when yaml-cpp has no position.
  Status Bad(const YAML::Node& at, const std::string& key, const std::string& what) const {
    int line = -1;
    if (at.IsDefined()) line = at.Mark().line;
    const std::string where = line >= 0 ? origin + ": line " + std::to_string(line + 1) : origin;
    return Status::InvalidArgument(where + ": " + key + ": " + what);
  }
};

// The string value of `n` at `where`, or an error naming it if `n` is a
// list or a mapping.
Status Scalar(const Ctx& c, const YAML::Node& n, const std::string& where, std::string& out) {
  if (!n.IsScalar()) return c.Bad(n, where, "must be a single value, not a list or a mapping");
  out = n.Scalar();
  return Status::Ok();
}

// A mapping's key that is empty (`: x`, `~: x`) or a list or mapping
// (`[a, b]: x`): said as such (it was "unknown key 'null'", or yaml-cpp's
// "bad conversion" without a line).
Status KeyIsName(const Ctx& c, const YAML::Node& key, const std::string& where) {
  if (key.IsScalar() && !key.IsNull()) return Status::Ok();
  return c.Bad(key, where.empty() ? "(top level)" : where,
               key.IsNull() || !key.IsDefined() ? "has an empty key" : "has a key that is a list or a mapping, not a name");
}

Status CheckKeys(const Ctx& c, const YAML::Node& n, const std::string& where,
                 std::initializer_list<const char*> allowed) {
  if (!n.IsMap()) return c.Bad(n, where.empty() ? "(top level)" : where, "must be a mapping");
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (auto s = KeyIsName(c, it->first, where); !s.ok()) return s;
    const std::string k = it->first.Scalar();
    bool ok = false;
    std::string list;
    for (const char* a : allowed) {
      ok = ok || k == a;
      list += std::string(list.empty() ? "" : ", ") + a;
    }
    if (!ok) return c.Bad(it->first, where.empty() ? k : where + "." + k, "unknown key (allowed: " + list + ")");
  }
  return Status::Ok();
}

// `out` holds the profile's module on entry; the module named replaces it,
// with the parameters given and the module's defaults for the others. Named
// as the profile's, parameters of the profile's that it drops are noted
// for PolicyWarnings (`profile: serving` then `skewed: {eviction: lfu}` is
// plain LFU, without serving's ageing: a review's finding; merging them
// instead made `random: {prefetch: epoch}` keep serving's per_read 0).
Status ParseModule(const Ctx& c, const YAML::Node& n, const std::string& where, ModuleSpec& out,
                   std::vector<std::string>& dropped) {
  const ModuleSpec profile = out;
  auto note_dropped = [&] {
    if (out.name != profile.name) return;
    std::string lost;
    for (const auto& [k, v] : profile.params)
      if (!out.params.count(k)) lost += fmt::format("{}{}: {}", lost.empty() ? "" : ", ", k, v);
    if (!lost.empty())
      dropped.push_back(fmt::format("{}: {} without the profile's parameters ({}): the module's defaults apply; "
                                    "give them under params to keep them",
                                    where, out.name, lost));
  };
  out.params.clear();
  if (n.IsScalar()) {  // shorthand: `eviction: lru`
    out.name = n.as<std::string>();
    note_dropped();
    return Status::Ok();
  }
  if (auto s = CheckKeys(c, n, where, {"name", "params"}); !s.ok()) return s;
  if (!n["name"]) return c.Bad(n, where + ".name", "missing");
  if (auto s = Scalar(c, n["name"], where + ".name", out.name); !s.ok()) return s;
  if (auto p = n["params"]) {
    if (!p.IsMap()) return c.Bad(p, where + ".params", "must be a mapping of numbers");
    for (auto it = p.begin(); it != p.end(); ++it) {
      if (auto s = KeyIsName(c, it->first, where + ".params"); !s.ok()) return s;
      const std::string k = it->first.Scalar();
      try {
        out.params[k] = it->second.as<double>();
      } catch (const YAML::Exception&) {
        return c.Bad(it->second, where + ".params." + k, "must be a number");
      }
    }
  }
  note_dropped();
  return Status::Ok();
}

// A key given with no value (every entry under it commented out) counts as
// absent, as in the config file.
bool Present(const YAML::Node& n) { return n && !n.IsNull(); }

bool AsBool(const YAML::Node& n, bool& out) {
  try {
    out = n.as<bool>();
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}

Result<PolicyFile> ParseImpl(const Ctx& c, const YAML::Node& root) {
  PolicyFile f;
  if (!root || root.IsNull()) return PolicyProfile("training");
  if (auto s = CheckKeys(c, root, "", {"profile", "patterns", "allocation", "overrides"}); !s.ok())
    return Err(s);
  if (auto p = root["profile"]; Present(p)) {
    std::string name;
    if (auto s = Scalar(c, p, "profile", name); !s.ok()) return Err(s);
    auto prof = PolicyProfile(name);
    if (!prof) return Err(c.Bad(p, "profile", prof.error().message()));
    f = *prof;
  } else {
    f = *PolicyProfile("training");
  }
  if (auto pats = root["patterns"]; Present(pats)) {
    if (auto s = CheckKeys(c, pats, "patterns", {"unknown", "sequential", "random", "skewed"}); !s.ok())
      return Err(s);
    for (size_t i = 0; i < kPatternNames.size(); ++i) {
      auto pn = pats[kPatternNames[i]];
      if (!Present(pn)) continue;
      const std::string where = std::string("patterns.") + kPatternNames[i];
      if (auto s = CheckKeys(c, pn, where, {"prefetch", "eviction"}); !s.ok()) return Err(s);
      // Each module checked here, where its line is known (PolicyFile::Validate
      // checks them again, without one).
      if (auto pf = pn["prefetch"]; Present(pf)) {
        ModuleSpec& m = f.patterns[i].prefetch;
        if (auto s = ParseModule(c, pf, where + ".prefetch", m, f.dropped_params); !s.ok()) return Err(s);
        if (auto made = MakePrefetchPolicy(m.name, m.params); !made)
          return Err(c.Bad(pf, where + ".prefetch", made.error().message()));
      }
      if (auto ev = pn["eviction"]; Present(ev)) {
        ModuleSpec& m = f.patterns[i].eviction;
        if (auto s = ParseModule(c, ev, where + ".eviction", m, f.dropped_params); !s.ok()) return Err(s);
        if (auto made = MakeEvictionPolicy(m.name, m.params); !made)
          return Err(c.Bad(ev, where + ".eviction", made.error().message()));
      }
    }
  }
  if (auto a = root["allocation"]; Present(a)) {
    if (auto s = CheckKeys(c, a, "allocation", {"period_ms", "hysteresis"}); !s.ok()) return Err(s);
    if (auto pm = a["period_ms"]) {
      // Decimal digits only: yaml-cpp would read 010 as octal 8 and 0x3E8 as
      // 1000. At most an hour, so the engine's clock arithmetic cannot wrap.
      std::string v;
      if (auto s = Scalar(c, pm, "allocation.period_ms", v); !s.ok()) return Err(s);
      const bool digits = !v.empty() && v.size() <= 10 && v.find_first_not_of("0123456789") == std::string::npos &&
                          (v.size() == 1 || v[0] != '0');
      if (!digits || std::stoull(v) == 0 || std::stoull(v) > kMaxAllocationPeriodMs)
        return Err(c.Bad(pm, "allocation.period_ms", "'" + v + "' must be a whole number of ms from 1 to " +
                                                     std::to_string(kMaxAllocationPeriodMs)));
      f.allocation_period_ms = std::stoull(v);
    }
    if (auto h = a["hysteresis"]) {
      try {
        f.hysteresis = h.as<double>();
      } catch (const YAML::Exception&) {
        return Err(c.Bad(h, "allocation.hysteresis", "must be a number"));
      }
      if (!(f.hysteresis >= 0 && f.hysteresis < 10)) return Err(c.Bad(h, "allocation.hysteresis", "must be in [0, 10)"));
    }
  }
  if (auto o = root["overrides"]; Present(o)) {
    if (!o.IsSequence()) return Err(c.Bad(o, "overrides", "must be a list"));
    auto strip_slash = [](std::string_view p) { return p.ends_with('/') ? p.substr(0, p.size() - 1) : p; };
    for (size_t i = 0; i < o.size(); ++i) {
      const std::string where = "overrides[" + std::to_string(i) + "]";
      const YAML::Node n = o[i];
      if (auto s = CheckKeys(c, n, where, {"prefix", "pattern", "pin", "never_cache", "quota"}); !s.ok())
        return Err(s);
      PathOverride ov;
      if (!n["prefix"]) return Err(c.Bad(n, where + ".prefix", "missing"));
      if (auto s = Scalar(c, n["prefix"], where + ".prefix", ov.prefix); !s.ok()) return Err(s);
      while (!ov.prefix.empty() && ov.prefix.front() == '/') {
        ov.prefix.erase(0, 1);
        ov.had_leading_slash = true;
      }
      // Matched literally against keys as the mount names them: a prefix no
      // key can start with would be accepted and never apply.
      if (auto bad = UnmatchablePrefix(ov.prefix)) return Err(c.Bad(n["prefix"], where + ".prefix", "'" + ov.prefix + "' " + *bad));
      if (auto p = n["pattern"]) {
        std::string v;
        if (auto s = Scalar(c, p, where + ".pattern", v); !s.ok()) return Err(s);
        for (size_t k = 0; k < kPatternNames.size(); ++k)
          if (v == kPatternNames[k]) ov.pattern = static_cast<int>(k);
        if (ov.pattern < 0)
          return Err(c.Bad(p, where + ".pattern", "'" + v + "' is not one of sequential, random, skewed, unknown"));
      }
      if (n["pin"] && !AsBool(n["pin"], ov.pin)) return Err(c.Bad(n["pin"], where + ".pin", "must be true or false"));
      if (n["never_cache"] && !AsBool(n["never_cache"], ov.never_cache))
        return Err(c.Bad(n["never_cache"], where + ".never_cache", "must be true or false"));
      if (auto q = n["quota"]) {
        std::string qs;
        if (auto s = Scalar(c, q, where + ".quota", qs); !s.ok()) return Err(s);
        auto sz = ParseSize(qs);
        if (!sz) return Err(c.Bad(q, where + ".quota", sz.error().message()));
        if (*sz == 0)
          return Err(c.Bad(q, where + ".quota", "must be more than 0 (to cache nothing under the prefix, use "
                                              "never_cache: true; for no quota, leave quota out)"));
        ov.quota_bytes = *sz;
      }
      if (ov.pin && ov.never_cache)
        return Err(c.Bad(n["never_cache"], where + ".never_cache", "cannot be combined with pin"));
      if (ov.quota_bytes && ov.never_cache)
        return Err(c.Bad(n["quota"], where + ".quota", "cannot be combined with never_cache (nothing is cached there)"));
      // Two entries for one prefix: which one applies would be arbitrary.
      for (size_t k = 0; k < f.overrides.size(); ++k)
        if (strip_slash(f.overrides[k].prefix) == strip_slash(ov.prefix))
          return Err(c.Bad(n["prefix"], where + ".prefix", "'" + ov.prefix + "' is already overrides[" + std::to_string(k) +
                                                  "].prefix (one entry per prefix)"));
      f.overrides.push_back(std::move(ov));
    }
  }
  if (auto s = f.Validate(c.origin); !s.ok()) return Err(s);
  return f;
}

}  // namespace

std::vector<std::string> PolicyWarnings(const PolicyFile& pf, const std::string& origin, uint64_t capacity_bytes) {
  std::vector<std::string> out;
  for (const auto& d : pf.dropped_params) out.push_back(fmt::format("{}: {}", origin, d));
  for (size_t i = 0; i < pf.overrides.size(); ++i) {
    const auto& o = pf.overrides[i];
    if (o.quota_bytes > 0 && capacity_bytes > 0 && o.quota_bytes >= capacity_bytes)
      out.push_back(fmt::format("{}: overrides[{}].quota ({}) is not below the cache's size ({}): it never applies",
                                origin, i, FormatSize(o.quota_bytes),
                                FormatSize(capacity_bytes)));
    if (o.had_leading_slash)
      out.push_back(fmt::format("{}: overrides[{}].prefix starts with '/': prefixes are paths from the mount root, "
                                "so it is taken as '{}' (not a path of the mount point)",
                                origin, i, o.prefix));
  }
  return out;
}

Result<PolicyFile> ParsePolicyFile(const std::string& yaml_text, const std::string& origin, bool empty_ok) {
  Ctx c{origin};
  try {
    auto doc = LoadOneDocument(yaml_text, origin);
    if (!doc) return Err(doc.error());
    YAML::Node root = *doc;
    if (!empty_ok && (!root || root.IsNull()))
      return Err(Status::InvalidArgument(fmt::format(
          "'{}' is empty (no profile, patterns or overrides): a file being rewritten reads so for a moment, so "
          "the policy in force stays; write 'profile: training' for the built-in defaults", origin)));
    if (auto s = RejectDuplicateKeys(root, origin); !s.ok()) return Err(s);
    return ParseImpl(c, root);
  } catch (const YAML::Exception& e) {
    return Err(Status::InvalidArgument(origin + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg));
  }
}

namespace {
// A reload reads the file once it has been still this long: written in
// place (an editor saving, a `>` redirect) it could be read half written,
// its first lines only, and still parse (a pin or an override lost without
// a word). Waited for at most kSettleTries times.
constexpr int64_t kSettleNs = 200'000'000;
constexpr int kSettleTries = 10;


void WaitUntilStill(const std::string& path) {
  for (int i = 0; i < kSettleTries; ++i) {
    struct stat st {};
    struct timespec now {};
    if (::stat(path.c_str(), &st) != 0 || ::clock_gettime(CLOCK_REALTIME, &now) != 0) return;
    const int64_t age = (int64_t(now.tv_sec) - st.st_mtim.tv_sec) * 1'000'000'000 + now.tv_nsec - st.st_mtim.tv_nsec;
    if (age >= kSettleNs) return;
    const int64_t wait = kSettleNs - std::max<int64_t>(age, 0);
    struct timespec ts {wait / 1'000'000'000, wait % 1'000'000'000};
    while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
  }
}
}  // namespace

Result<PolicyFile> LoadPolicyFile(const std::string& path, PolicyFileUse use) {
  if (path.empty()) return PolicyProfile("training");
  if (use == PolicyFileUse::kReload) WaitUntilStill(path);
  // Opened without blocking: a mount reads the file again on each SIGHUP, on
  // its maintenance thread, and a FIFO nobody writes to held that thread
  // (and the unmount waiting for it) for good. A mount takes a regular file
  // only; a one-shot reader (`config --check`, `sim`) a pipe too (`<(...)`,
  // /dev/stdin), opened blocking to wait for its writer as any reader would.
  // (Opened without blocking first, then again, the writer already waiting
  // was let through by the first open, wrote into a pipe that closed under
  // it, and the second open waited for a writer that was gone: an engine
  // test hung so.)
  struct stat pre {};
  const bool fifo_once = use == PolicyFileUse::kOnce && ::stat(path.c_str(), &pre) == 0 && S_ISFIFO(pre.st_mode);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (fifo_once ? 0 : O_NONBLOCK));
  if (fd < 0 && errno == ENXIO)
    return Err(Status::InvalidArgument(fmt::format("'{}' is a socket, not a policy file (a regular file)", path)));
  if (fd < 0) return Err(Status::NotFound(fmt::format("cannot open '{}': {}", path, std::strerror(errno))));
  struct stat st {};
  const char* kind = nullptr;
  const bool pipe_ok = use == PolicyFileUse::kOnce;
  if (::fstat(fd, &st) != 0) kind = "unreadable";
  else if (S_ISDIR(st.st_mode)) kind = "a directory";
  else if (S_ISFIFO(st.st_mode) && !pipe_ok) kind = "a FIFO";
  else if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) kind = "a device";
  if (kind) {
    ::close(fd);
    return Err(Status::InvalidArgument(fmt::format(
        "'{}' is {}, not a policy file (a regular file{})", path, kind,
        use != PolicyFileUse::kOnce && S_ISFIFO(st.st_mode) ? ": a mount reads it again on SIGHUP" : "")));
  }
  if (S_ISFIFO(st.st_mode) && !fifo_once) {  // made a FIFO since the stat: opened again, blocking
    ::close(fd);
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Err(Status::NotFound(fmt::format("cannot open '{}': {}", path, std::strerror(errno))));
  } else {
    (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  }
  std::string text;
  int err = 0;
  for (char buf[65536];;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (err) return Err(Status::IoError(fmt::format("cannot read '{}': {}", path, std::strerror(err))));
  return ParsePolicyFile(text, path, /*empty_ok=*/use != PolicyFileUse::kReload);
}

}  // namespace igt::engine
