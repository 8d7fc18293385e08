// The mount(8) helper entry point: `mount -t fuse.igtcache SOURCE DIR -o ...`
// and /etc/fstab lines. mount(8) runs /sbin/mount.fuse.igtcache (a symlink
// to igtcache) as `mount.fuse.igtcache SOURCE DIR [-sfnv] -o OPTS`; without
// that symlink it runs mount.fuse3, which runs `igtcache SOURCE DIR -o OPTS`
// from PATH. Both land here and become an ordinary daemonized `igtcache
// mount` (the command returns once the mount is ready). See docs/CLI.md.
#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "src/cli/ops_cmds.h"

namespace igt {
namespace {

bool LooksLikeSource(const std::string& s) { return s.find("://") != std::string::npos; }

}  // namespace

// Generic mount(8)/systemd options that mean nothing to igtcache or FUSE.
bool MountBookkeepingOption(const std::string& o) {
  static const char* kDrop[] = {"defaults", "auto", "noauto", "user", "users", "nouser", "owner",
                                "group", "nofail", "_netdev", "rw", "ro", "sync", "async"};
  for (const char* d : kDrop)
    if (o == d) return true;
  return o.rfind("x-", 0) == 0 || o.rfind("comment=", 0) == 0 || o.rfind("helper=", 0) == 0;
}

namespace {

// The helper's own options (the rest go to FUSE), each a flag of `igtcache
// mount` of the same name with '-' for '_'.
const std::map<std::string, std::string MountArgs::*>& OwnOptions() {
  static const std::map<std::string, std::string MountArgs::*> kOwn = {
      {"config", &MountArgs::config_path},   {"cache_dir", &MountArgs::cache_dir},
      {"cache_size", &MountArgs::cache_size}, {"endpoint", &MountArgs::endpoint},
      {"region", &MountArgs::region},         {"profile", &MountArgs::profile},
      {"addressing", &MountArgs::addressing}, {"log_level", &MountArgs::log_level},
      {"log_file", &MountArgs::log_file},     {"metrics_addr", &MountArgs::metrics_addr},
      {"trace_out", &MountArgs::trace_out},   {"expected_bucket_owner", &MountArgs::expected_bucket_owner}};
  return kOwn;
}

Status ApplyOption(const std::string& opt, MountArgs& m, std::vector<std::string>& warnings) {
  const auto eq = opt.find('=');
  const std::string k = opt.substr(0, eq), v = eq == std::string::npos ? "" : opt.substr(eq + 1);
  const auto& kOwn = OwnOptions();
  if (k == "requester_pays") {
    if (eq != std::string::npos) return Status::InvalidArgument("mount option 'requester_pays' takes no value");
    m.requester_pays = true;
    return Status::Ok();
  }
  if (auto it = kOwn.find(k); it != kOwn.end()) {
    if (eq == std::string::npos || v.empty())
      return Status::InvalidArgument(fmt::format("mount option '{}' needs a value ({}=...)", k, k));
    // The last wins (mount(8) puts the command line's -o after fstab's:
    // that is how an fstab option is overridden), said, not silent.
    if (!(m.*(it->second)).empty() && m.*(it->second) != v)
      warnings.push_back(fmt::format("mount option '{}' given twice: '{}' is used, not '{}'", k, v, m.*(it->second)));
    m.*(it->second) = v;
    return Status::Ok();
  }
  if (opt.empty() || MountBookkeepingOption(opt)) return Status::Ok();
  m.fuse_opts.push_back(opt);  // allow_other, nodev, nosuid, noatime, ...
  return Status::Ok();
}

}  // namespace

std::optional<std::string> HelperOptionFlag(std::string_view opt) {
  const std::string k(opt.substr(0, opt.find('=')));
  if (k != "requester_pays" && !OwnOptions().contains(k)) return std::nullopt;
  std::string flag = "--" + k;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

std::optional<Result<HelperCall>> ParseMountHelper(const std::vector<std::string>& argv) {
  if (argv.empty()) return std::nullopt;
  const std::string name = std::filesystem::path(argv[0]).filename().string();
  const bool as_helper = name.rfind("mount.", 0) == 0;  // mount.fuse.igtcache, mount.igtcache
  if (!as_helper && !(argv.size() >= 3 && LooksLikeSource(argv[1]))) return std::nullopt;

  HelperCall c;
  std::vector<std::string> pos;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-o" || a == "-t") {
      if (i + 1 >= argv.size()) return Result<HelperCall>(Err(Status::InvalidArgument(a + " needs a value")));
      if (a == "-o")
        for (const auto& o : SplitComma(argv[++i]))
          if (auto s = ApplyOption(o, c.mount, c.warnings); !s.ok()) return Result<HelperCall>(Err(s));
      if (a == "-t") ++i;  // fuse.igtcache: nothing to choose
    } else if (a.rfind("-o", 0) == 0 && a.size() > 2) {
      for (const auto& o : SplitComma(a.substr(2)))
        if (auto s = ApplyOption(o, c.mount, c.warnings); !s.ok()) return Result<HelperCall>(Err(s));
    } else if (a.size() > 1 && a[0] == '-') {
      // mount(8) helper flags: -f fake, -n no mtab, -s sloppy, -v verbose, -r read-only.
      for (char f : a.substr(1)) {
        if (f == 'f') c.fake = true;
        else if (f != 'n' && f != 's' && f != 'v' && f != 'r' && f != 'w')
          return Result<HelperCall>(Err(Status::InvalidArgument(
              a[1] == '-' ? fmt::format("unknown mount flag '{}' ({} takes SOURCE DIR [-fnsvrw] "
                                        "[-o OPTIONS]; igtcache --help for the rest)", a, name)
                          : fmt::format("unknown mount flag -{} in '{}'", f, a))));
      }
    } else {
      pos.push_back(a);
    }
  }
  if (pos.size() != 2)
    return Result<HelperCall>(Err(Status::InvalidArgument(
        fmt::format("usage: {} SOURCE MOUNTPOINT [-o cache_dir=DIR,cache_size=10G,config=FILE,...]", name))));
  c.mount.source = pos[0];
  c.mount.mountpoint = pos[1];
  // An fstab source may carry the type prefix of mount.fuse3 ("igtcache#s3://b").
  if (auto h = c.mount.source.find('#'); h != std::string::npos && c.mount.source.substr(0, h) == "igtcache")
    c.mount.source = c.mount.source.substr(h + 1);
  return Result<HelperCall>(std::move(c));
}

}  // namespace igt
