#include "basin/core/config/program_error.h"

#include <iostream>

#include <c10/util/Exception.h>

#include "basin/core/base/checkpoint_error.h"
#include "basin/core/config/config_error.h"

namespace basin {

int report_error(const std::string& program, const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const ConfigError& bad) {
    std::cerr << program << ": " << bad.what() << std::endl;
    return kExitBadInput;
  } catch (const CheckpointError& bad) {
    std::cerr << program << ": " << bad.what() << std::endl;
    return kExitBadInput;
  } catch (const c10::Error& failed) {
    std::cerr << program << ": error: " << failed.what_without_backtrace() << std::endl;
  } catch (const std::exception& failed) {
    std::cerr << program << ": error: " << failed.what() << std::endl;
  } catch (...) {
    std::cerr << program << ": error: an exception that is not a std::exception" << std::endl;
  }
  return 1;
}

}  // namespace basin
