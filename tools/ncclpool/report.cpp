#include "report.hpp"

#include "json.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace ncclpool::tool {

Cell text_cell(std::string s) { return Cell{std::move(s), false, 0}; }

Cell number_cell(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return Cell{buf, true, v};
}

Cell integer_cell(long long v) { return Cell{std::to_string(v), true, static_cast<double>(v)}; }

std::string format_bytes(std::size_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t v = bytes;
  int u = 0;
  while (u < 4 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return std::to_string(v) + " " + units[u];
}

Cell bytes_cell(std::size_t bytes) { return Cell{format_bytes(bytes), true, static_cast<double>(bytes)}; }

void Table::add(std::vector<Cell> row) {
  row.resize(headers.size());
  rows.push_back(std::move(row));
}

std::string Table::text() const {
  std::vector<std::size_t> width(headers.size());
  for (std::size_t c = 0; c < headers.size(); ++c) {
    width[c] = headers[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].text.size());
  }
  std::ostringstream o;
  if (!title.empty()) o << title << "\n";
  // Text left-aligned, numbers right-aligned: columns of figures read down cleanly.
  auto line = [&](auto&& cell_text, auto&& right) {
    std::string s = " ";
    for (std::size_t c = 0; c < headers.size(); ++c) {
      const std::string t = cell_text(c);
      const std::string pad(width[c] - t.size(), ' ');
      s += " " + (right(c) ? pad + t : t + pad);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    o << s << "\n";
  };
  auto numeric_column = [&](std::size_t c) {
    return !rows.empty() && std::all_of(rows.begin(), rows.end(), [&](const auto& r) { return r[c].is_number || r[c].text == "-"; });
  };
  line([&](std::size_t c) { return headers[c]; }, numeric_column);
  line([&](std::size_t c) { return std::string(width[c], '-'); }, numeric_column);
  for (const auto& r : rows) line([&](std::size_t c) { return r[c].text; }, numeric_column);
  return o.str();
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 9e15) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string Table::json() const {
  std::ostringstream o;
  o << "{\"title\":" << json_quote(title) << ",\"rows\":[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    o << (i ? "," : "") << "{";
    for (std::size_t c = 0; c < keys.size(); ++c) {
      const Cell& cell = rows[i][c];
      o << (c ? "," : "") << json_quote(keys[c]) << ":";
      if (cell.is_number) o << json_number(cell.number);
      else if (cell.text == "-") o << "null";
      else o << json_quote(cell.text);
    }
    o << "}";
  }
  o << "]}";
  return o.str();
}

std::string Report::text() const {
  std::ostringstream o;
  o << (suite == "tune" ? "ncclpool tune" : "ncclpool bench " + suite) << "\n";
  std::size_t w = 0;
  for (const auto& [k, v] : facts) w = std::max(w, k.size());
  for (const auto& [k, v] : facts) o << "  " << k << std::string(w - k.size(), ' ') << "  " << v << "\n";
  for (const auto& t : tables) o << "\n" << t.text();
  if (!notes.empty()) o << "\n";
  for (const auto& n : notes) o << "* " << n << "\n";
  return o.str();
}

std::string Report::json() const {
  std::ostringstream o;
  o << "{\"suite\":" << json_quote(suite) << ",\"facts\":{";
  for (std::size_t i = 0; i < facts.size(); ++i) o << (i ? "," : "") << json_quote(facts[i].first) << ":" << json_quote(facts[i].second);
  o << "},\"tables\":[";
  for (std::size_t i = 0; i < tables.size(); ++i) o << (i ? "," : "") << tables[i].json();
  o << "],\"notes\":[";
  for (std::size_t i = 0; i < notes.size(); ++i) o << (i ? "," : "") << json_quote(notes[i]);
  o << "]}";
  return o.str();
}

void print(const Report& report, bool json) { std::fputs(json ? (report.json() + "\n").c_str() : report.text().c_str(), stdout); }

Progress::Progress(std::string what, std::size_t total) : what_(std::move(what)), total_(std::max<std::size_t>(total, 1)), enabled_(isatty(2) != 0) {}

Progress::~Progress() { finish(); }

void Progress::step(const std::string& label) { update(done_ + 1, total_, label); }

void Progress::update(std::size_t done, std::size_t total, const std::string& label) {
  done_ = done;
  total_ = std::max<std::size_t>(total, 1);
  if (!enabled_) return;
  // \33[K clears what a longer previous label left on the line.
  std::fprintf(stderr, "\r%s [%zu/%zu] %s\33[K", what_.c_str(), std::min(done_, total_), total_, label.c_str());
  std::fflush(stderr);
  open_ = true;
}

void Progress::finish() {
  if (open_) std::fputs("\r\33[K", stderr);
  open_ = false;
}

}  // namespace ncclpool::tool
