// kattn scale --model: predicted time and efficiency up to many ranks (see scale_model.cpp).
#pragma once

#include "args.hpp"

namespace kattn {
namespace cli {

int scale_model(Args& args);

}  // namespace cli
}  // namespace kattn
