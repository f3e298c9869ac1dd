// Agreement records: before anything collective, ranks all-gather a record of who they are (pool
// name, attachment ordinal on the communicator, agreement number) and what they are about to do
// (phase; count, bytes and digest of the segments), and in check mode where their live blocks sit.
// Equal records mean every rank is about to make the same calls in the same order; anything else is
// reported, naming who differs, instead of hanging or pairing one pool's window with another's.

#include "registry_impl.hpp"

#include "core/environment.hpp"
#include "core/fnv1a.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

namespace ncclpool::detail {

namespace {

std::string name_of(const AgreementRecord& r) {
  char buf[17] = {};
  std::memcpy(buf, &r.words[word::name_prefix], 16);
  return buf;
}

std::string hex(std::uint64_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << v;
  return out.str();
}

// "pool 'comm' (attachment #0), commit #5: 1 segment(s), 4194304 bytes, sequences 3..3, digest 0x..."
std::string describe_record(const AgreementRecord& r) {
  const auto& w = r.words;
  if (w[word::magic] != kAgreementMagic)
    return "not an ncclpool agreement: another collective ran in its place on this communicator (a rank skipped an "
           "agreement point, made an extra one, or called a collective in between)";
  std::ostringstream msg;
  msg << "pool '" << name_of(r) << "' (attachment #" << w[word::ordinal] << "), " << phase_name(static_cast<AgreementPhase>(w[word::phase]))
      << " #" << w[word::epoch] << ": ";
  if (voted_no_of(w[word::vote])) msg << "voted no after an error on this rank (its own message says which); ";
  msg << w[word::count] << " segment(s), " << w[word::bytes] << " bytes";
  if (w[word::count] != 0) msg << ", sequences " << w[word::first] << ".." << w[word::last] << ", digest " << hex(w[word::digest]);
  const CheckLevel check = check_level_of(w[word::check]);
  if (check != CheckLevel::off) msg << ", check " << to_string(check);
  if (check >= CheckLevel::layout) msg << ", " << w[word::live_blocks] << " live block(s) with layout digest " << hex(w[word::layout_digest]);
  if (const int kernels = symmetric_kernels_of(w[word::check]); kernels >= 0) {
    if ((kernels & kSymmetricKernelsOff) != 0) msg << ", symmetric kernels off (windows without the symmetric flag)";
    if ((kernels & kSymmetricKernelsFenced) != 0) msg << ", symmetric kernels fenced (ncclpool fences every collective on windows)";
    const int ctas = kernels & ~(kSymmetricKernelsOff | kSymmetricKernelsFenced);
    msg << ", symmetric kernels' CTAs " << (ctas == 0 ? std::string("NCCL's choice") : std::to_string(ctas));
  }
  msg << ", scope period " << scope_period_of(w[word::check]);
  if (w[word::kind] != 0) msg << ", attached as " << to_string(static_cast<RegistrationKind>(w[word::kind] - 1));
  if (w[word::settings] != 0) msg << ", agreed settings digest " << hex(w[word::settings]);
  if (const std::uint64_t moved = placement_recoveries_of(w[word::vote]); moved != 0)
    msg << ", " << moved << " out-of-memory recover" << (moved == 1 ? "y" : "ies") << " that may have moved blocks";
  return msg.str();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << (ranks.size() > 1 ? "ranks " : "rank ");
  for (std::size_t i = 0; i < ranks.size(); ++i) out << (i ? "," : "") << ranks[i];
  return out.str();
}

}  // namespace

const char* phase_name(AgreementPhase phase) {
  switch (phase) {
    case AgreementPhase::attach: return "attach";
    case AgreementPhase::commit: return "commit";
    case AgreementPhase::detach: return "detach";
    case AgreementPhase::trim: return "trim";
    case AgreementPhase::trim_verdict: return "trim verdict";
    case AgreementPhase::layout_detail: return "layout detail";
    case AgreementPhase::buffers: return "buffer check";
  }
  return "unknown phase";
}

AgreementRecord make_agreement(const AgreementInput& in) {
  Fnv1a segments;
  std::uint64_t bytes = 0;
  for (auto [sequence, size] : in.segments) {
    segments.mix(sequence);
    segments.mix(size);
    bytes += size;
  }
  Fnv1a name;
  const std::string& pool_name = in.pool_name ? *in.pool_name : std::string();
  for (unsigned char c : pool_name) name.mix(c);
  AgreementRecord r;
  auto& w = r.words;
  w[word::magic] = kAgreementMagic;
  w[word::phase] = static_cast<std::uint64_t>(in.phase);
  w[word::epoch] = in.epoch;
  w[word::ordinal] = in.ordinal;
  w[word::name_digest] = name.value();
  std::memcpy(&w[word::name_prefix], pool_name.data(), std::min<std::size_t>(pool_name.size(), 16));
  w[word::count] = in.segments.size();
  w[word::bytes] = bytes;
  w[word::digest] = segments.value();
  w[word::first] = in.segments.empty() ? 0 : in.segments.front().first;
  w[word::last] = in.segments.empty() ? 0 : in.segments.back().first;
  w[word::check] = static_cast<std::uint64_t>(in.check) | (static_cast<std::uint64_t>(in.symmetric_kernels + 1) & 0xffffff) << 8 |
                   static_cast<std::uint64_t>(in.scope_period) << 32;
  w[word::layout_digest] = in.layout_digest;
  w[word::live_blocks] = in.live_blocks;
  w[word::vote] = (in.voted_no ? 1 : 0) | std::min<std::uint64_t>(in.placement_recoveries, 0xffffffffu) << 32;
  w[word::settings] = in.settings_digest;
  w[word::kind] = 1 + static_cast<std::uint64_t>(in.kind);
  return r;
}

std::uint64_t settings_digest(const std::string& settings) {
  if (settings.empty()) return 0;
  Fnv1a d;
  for (unsigned char c : settings) d.mix(c);
  return d.value() == 0 ? 1 : d.value();
}

std::uint64_t layout_digest(const std::vector<BlockLocation>& blocks) {
  Fnv1a d;
  for (const auto& b : blocks) {
    d.mix(b.segment_sequence);
    d.mix(b.offset);
    d.mix(b.size);
  }
  return d.value();
}

void check_agreement(const std::vector<AgreementRecord>& records, const AgreementRecord& mine, const Communicator& comm, bool late,
                     const std::string& settings) {
  if (std::all_of(records.begin(), records.end(), [&](const AgreementRecord& r) { return r == records.front(); })) return;
  // Group ranks by what they brought, so the message reads "ranks 0,1,2: ...; rank 3: ...".
  std::map<std::vector<std::uint64_t>, std::vector<int>> groups;
  for (std::size_t rank = 0; rank < records.size(); ++rank)
    groups[{records[rank].words.begin(), records[rank].words.end()}].push_back(static_cast<int>(rank));
  std::ostringstream msg;
  const auto phase = static_cast<AgreementPhase>(mine.words[word::phase]);
  msg << comm.describe() << ": ranks disagree at " << phase_name(phase) << " #" << mine.words[word::epoch] << " of pool '"
      << name_of(mine) << "'";
  if (late) msg << " (found after the fact: this rank had nothing to register there and did not wait)";
  msg << "; nothing was registered there:";
  for (const auto& [words, ranks] : groups) {
    AgreementRecord r;
    std::copy(words.begin(), words.end(), r.words.begin());
    msg << ' ' << rank_list(ranks) << ": " << describe_record(r) << ';';
  }
  const auto differ = [&](auto field) {
    return std::any_of(records.begin(), records.end(), [&](const AgreementRecord& r) { return r.words[word::magic] == kAgreementMagic && field(r) != field(mine); });
  };
  const bool voted_no = std::any_of(records.begin(), records.end(), [](const AgreementRecord& r) { return voted_no_of(r.words[word::vote]); });
  const std::string my_kind = mine.words[word::kind] != 0 ? to_string(static_cast<RegistrationKind>(mine.words[word::kind] - 1)) : "?";
  if (differ([](const AgreementRecord& r) { return r.words[word::settings]; }))
    msg << " (the ranks' agreed settings differ, so they would use the pool differently: this rank attaches as " << my_kind
        << " with agreed settings '" << settings << "'; give every rank the same settings)";
  else if (differ([](const AgreementRecord& r) { return r.words[word::kind]; }))
    msg << " (the ranks attach with different kinds: this rank as " << my_kind << (settings.empty() ? "" : " with agreed settings '" + settings + "'")
        << "; a local attach on one rank and a symmetric one on another would pair a window registration with another collective)";
  else if (differ([](const AgreementRecord& r) { return symmetric_kernels_of(r.words[word::check]); }))
    msg << " (the ranks would launch NCCL's symmetric kernels differently, with different CTA counts, on some ranks only or fenced "
           "on some ranks only, which waits forever for blocks that never come or pairs unlike launches: give every rank the same NCCL, "
           "NCCL_SYM_CTAS, NCCLPOOL_SYM_CTAS, NCCLPOOL_SYMMETRIC_KERNELS, fence declaration (ncclpool_prefer_symmetric_fence, which "
           "ncclpool.torch and ncclpool.sglang make: every rank or none), CTA preference (ncclpool_prefer_nccl_symmetric_ctas, which "
           "ncclpool.torch.fsdp and ncclpool.torch.megatron.install make: every rank or none) and profile)";
  else if (differ([](const AgreementRecord& r) { return scope_period_of(r.words[word::check]); }))
    msg << " (the ranks' scope periods differ, so their scope ends would agree at different uses: give every rank the "
           "same RegistryOptions::scope_period and check level)";
  else if (differ([](const AgreementRecord& r) { return placement_recoveries_of(r.words[word::vote]); }))
    msg << " (an out-of-memory recovery on some ranks released empty segments and grew again, so equal requests may now "
           "sit in other segments there than elsewhere: the pool's symmetric layout can no longer be trusted; reserve() "
           "enough up front and recreate the pool)";
  else if (voted_no)
    msg << " (a rank voted no: see the error raised on that rank)";
  else
    msg << " (ranks must create the same segments in the same order and attach and commit their pools in the same "
           "order, with the same pool names: use deterministic pools fed the same requests)";
  throw AgreementError(msg.str());
}

bool only_layouts_differ(const std::vector<AgreementRecord>& records) {
  auto without_layout = [](AgreementRecord r) {
    r.words[word::layout_digest] = 0;
    r.words[word::live_blocks] = 0;
    return r;
  };
  const AgreementRecord first = without_layout(records.front());
  bool layouts_differ = false;
  for (const auto& r : records) {
    if (r.words[word::magic] != kAgreementMagic || check_level_of(r.words[word::check]) < CheckLevel::layout) return false;
    if (without_layout(r) != first) return false;
    layouts_differ = layouts_differ || r.words[word::layout_digest] != records.front().words[word::layout_digest] ||
                     r.words[word::live_blocks] != records.front().words[word::live_blocks];
  }
  return layouts_differ;
}

TripleExchange exchange_until_different(Communicator& comm, AgreementPhase phase, const std::vector<Triple>& mine,
                                        std::size_t compared_words, std::size_t max_rounds) {
  constexpr std::size_t kPerRecord = 4;  // words 3.. of a record: four triples
  TripleExchange out;
  std::size_t rounds = 1;  // at least one, so that ranks with no items still meet the others
  for (std::size_t round = 0; round < rounds; ++round) {
    AgreementRecord r;
    r.words[0] = kAgreementMagic;
    r.words[1] = static_cast<std::uint64_t>(phase);
    r.words[2] = mine.size();
    for (std::size_t k = 0; k < kPerRecord && round * kPerRecord + k < mine.size(); ++k)
      std::copy(mine[round * kPerRecord + k].begin(), mine[round * kPerRecord + k].end(), r.words.begin() + static_cast<long>(3 + 3 * k));
    const std::vector<AgreementRecord> all = comm.all_gather(r);
    for (const auto& a : all)
      if (a.words[0] != kAgreementMagic || a.words[1] != r.words[1])
        throw AgreementError(comm.describe() + ": " + phase_name(phase) + ": a rank sent something else (another collective ran " +
                             "in its place: every rank must make the same checks)");
    if (round == 0) {
      for (const auto& a : all) out.counts.push_back(a.words[2]);
      const std::uint64_t most = *std::max_element(out.counts.begin(), out.counts.end());
      rounds = std::clamp<std::size_t>((most + kPerRecord - 1) / kPerRecord, 1, max_rounds);
    }
    for (std::size_t k = 0; k < kPerRecord; ++k) {
      const auto base = static_cast<long>(3 + 3 * k);
      const bool same = std::all_of(all.begin(), all.end(), [&](const AgreementRecord& a) {
        return std::equal(a.words.begin() + base, a.words.begin() + base + static_cast<long>(compared_words), all.front().words.begin() + base);
      });
      if (same) continue;
      out.first_difference = round * kPerRecord + k;
      for (const auto& a : all) out.at_difference.push_back({a.words[base], a.words[base + 1], a.words[base + 2]});
      return out;
    }
  }
  return out;
}

// Bounded: past 64 rounds (256 blocks) it reports only that the digests differ.
void explain_layout_difference(Communicator& comm, const std::vector<AgreementRecord>& records,
                               const std::vector<BlockLocation>& mine, const std::string& pool_name) {
  std::ostringstream msg;
  msg << comm.describe() << ": check mode: the symmetric layouts of pool '" << pool_name
      << "' differ across ranks (a symmetric kernel would read peers at the wrong offsets):";
  for (std::size_t i = 0; i < records.size(); ++i)
    msg << " rank " << i << ": " << records[i].words[word::live_blocks] << " live block(s), digest " << hex(records[i].words[word::layout_digest]) << ';';
  std::vector<Triple> blocks;
  for (const auto& b : mine) blocks.push_back({b.segment_sequence + 1, b.offset, b.size});  // 0 = no block
  const TripleExchange x = exchange_until_different(comm, AgreementPhase::layout_detail, blocks, 3, 64);
  if (x.first_difference) {
    msg << " first difference at live block #" << *x.first_difference << " (in allocation order):";
    for (std::size_t i = 0; i < x.at_difference.size(); ++i) {
      const Triple& t = x.at_difference[i];
      msg << " rank " << i << ": ";
      if (t[0] == 0) {
        msg << "none;";
      } else {
        msg << "segment " << t[0] - 1 << " offset " << t[1] << " size " << t[2] << ';';
      }
    }
  }
  throw AgreementError(msg.str() + " (every rank must make the same allocation requests in the same order)");
}

const char* to_string_level(CheckLevel level) noexcept {
  switch (level) {
    case CheckLevel::off: return "off";
    case CheckLevel::layout: return "layout";
    case CheckLevel::collectives: return "collectives";
  }
  return "unknown";
}

}  // namespace ncclpool::detail

namespace ncclpool {

const char* to_string(CheckLevel level) noexcept { return detail::to_string_level(level); }

CheckLevel check_level_from_env() {
  const char* env = environment::check();
  if (env == nullptr || *env == '\0') return CheckLevel::off;
  const std::string v = env;
  if (v == "0" || v == "off") return CheckLevel::off;
  if (v == "1" || v == "layout") return CheckLevel::layout;
  if (v == "2" || v == "collectives") return CheckLevel::collectives;
  throw InvalidArgument("NCCLPOOL_CHECK='" + v + "' is not one of off, layout, collectives (or 0, 1, 2)");
}

}  // namespace ncclpool
