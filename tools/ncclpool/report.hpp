#pragma once
// What every `ncclpool bench` suite prints: a few facts about the run, tables, notes. One model,
// two renderings: aligned text for people, JSON (--json) for machines and plots.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace ncclpool::tool {

/// One table cell: shown as `text`; in JSON a number when `is_number`.
struct Cell {
  std::string text;
  bool is_number = false;
  double number = 0;
};
Cell text_cell(std::string s);
/// A number shown with `decimals` digits (JSON keeps full precision).
Cell number_cell(double v, int decimals);
Cell integer_cell(long long v);
/// "1 KiB", "64 MiB", "1 GiB" for powers of two; plain bytes otherwise. JSON: the byte count.
Cell bytes_cell(std::size_t bytes);
std::string format_bytes(std::size_t bytes);
/// A JSON number, or null for NaN and infinities (which JSON has no way to write).
std::string json_number(double v);

struct Table {
  std::string title;
  std::vector<std::string> headers;  // shown in text
  std::vector<std::string> keys;     // JSON member names, one per column
  std::vector<std::vector<Cell>> rows;

  void add(std::vector<Cell> row);
  [[nodiscard]] std::string text() const;
  [[nodiscard]] std::string json() const;
};

struct Report {
  std::string suite;                                       // "alloc", "scope", "coll"
  std::vector<std::pair<std::string, std::string>> facts;  // device, NCCL version, settings
  std::vector<Table> tables;
  std::vector<std::string> notes;                          // readings, targets, what was skipped

  [[nodiscard]] std::string text() const;
  [[nodiscard]] std::string json() const;
};

/// Prints the report on stdout: JSON (one line) with `json`, else the text.
void print(const Report& report, bool json);

/// Progress on stderr while a command runs: one rewritten line on a terminal, nothing otherwise
/// (so logs and --json stay clean). Counts steps of a known total and shows the current one.
class Progress {
 public:
  Progress(std::string what, std::size_t total);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void step(const std::string& label);
  /// Shows `done` of `total` (for work that counts itself, e.g. replayed events).
  void update(std::size_t done, std::size_t total, const std::string& label);
  /// Ends the line (also done by the destructor).
  void finish();

 private:
  std::string what_;
  std::size_t total_;
  std::size_t done_ = 0;
  bool enabled_;
  bool open_ = false;
};

}  // namespace ncclpool::tool
