#include <cmath>
#include <sstream>
#include <string>

#include "daemon/commands/command.hpp"

namespace tapstream {

CLI::Validator number_between(double low, double high, const std::string& unit) {
  const auto text = [](double value) {
    std::ostringstream out;
    if (value == std::trunc(value) && std::fabs(value) < 1e15) {
      out << static_cast<long long>(value);  // 10000000, not 1e+07
    } else {
      out << value;
    }
    return out.str();
  };
  const std::string description =
      text(low) + " and " + text(high) + (unit.empty() ? "" : " " + unit);
  return CLI::Validator(
      [description, low, high](std::string& text) -> std::string {
        double value = 0.0;
        if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) || value < low ||
            value > high) {
          return "'" + text + "' is not between " + description;
        }
        return {};
      },
      "between " + description);
}

}  // namespace tapstream
